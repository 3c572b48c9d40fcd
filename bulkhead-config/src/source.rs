//! Reading a config file: a regular file only, never blocking, at most
//! [`MAX_SOURCE_BYTES`] + 1 bytes, UTF-8. The one reader of the `bulkhead` command and of
//! the run-time deploy path (`Deploy::file`, the watcher, `check_deploy`), so both refuse
//! the same files with the same words.

use std::io::{Error, ErrorKind, Read as _};
use std::path::Path;

use crate::MAX_SOURCE_BYTES;
use crate::diagnostic::{Diagnostic, Diagnostics, Severity};

/// Reads a config or deploy file for [`parse_file`](crate::parse_file): at most
/// [`MAX_SOURCE_BYTES`] + 1 bytes of it, so a huge file costs no more than that.
///
/// Only a regular file is read: a named pipe, socket, device or directory is refused by
/// its type before it is opened (a pipe with no writer would block its reader forever),
/// and the file is opened non-blocking and checked again once open (it may have been
/// swapped in between). Symbolic links are followed; a loop of them is an error.
///
/// A file within the limit must be UTF-8. A larger one is returned cut after the limit,
/// and [`parse_file`](crate::parse_file) refuses it as too large.
///
/// # Errors
///
/// An [`std::io::Error`] whose message says what is wrong in the reader's terms: not
/// found, a symbolic-link loop, not a regular file (and what it is), or not UTF-8 — then
/// of kind [`ErrorKind::InvalidData`] holding a [`NotUtf8`] (see [`NotUtf8::of`]), which
/// is a problem of the file, at its first invalid byte, rather than a failure to read it.
///
/// ```
/// let err = bulkhead_config::read_deploy_file("/nonexistent/bulkheads.yaml").unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
/// let err = bulkhead_config::read_deploy_file(std::env::temp_dir()).unwrap_err();
/// assert!(err.to_string().contains("a directory, not a regular file"), "{err}");
/// ```
pub fn read_deploy_file(path: impl AsRef<Path>) -> std::io::Result<String> {
    let path = path.as_ref();
    let explain = |e: Error| -> Error {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return Error::new(
                e.kind(),
                "its path is a loop of symbolic links (each points, in the end, at another)",
            );
        }
        if e.kind() == ErrorKind::NotFound {
            return Error::new(e.kind(), "there is no such file");
        }
        e
    };
    not_special(&std::fs::metadata(path).map_err(explain)?)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path).map_err(explain)?;
    not_special(&file.metadata()?)?;
    read_text(file)
}

/// At most [`MAX_SOURCE_BYTES`] + 1 bytes of `input`, checked as [`read_deploy_file`] checks
/// them.
fn read_text(input: impl std::io::Read) -> std::io::Result<String> {
    let limit = MAX_SOURCE_BYTES as u64 + 1;
    let mut bytes = Vec::new();
    input.take(limit).read_to_end(&mut bytes)?;
    if bytes.len() > MAX_SOURCE_BYTES {
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    String::from_utf8(bytes).map_err(|e| {
        Error::new(
            ErrorKind::InvalidData,
            NotUtf8::at(e.as_bytes(), e.utf8_error()),
        )
    })
}

/// Reads a file the `bulkhead` command was given: as [`read_deploy_file`], except that a named
/// pipe or a character device is read as a stream, so that `bulkhead check <(…)`,
/// `/dev/stdin` and a pipe a CI step writes to work. A named pipe is opened without
/// waiting for a writer; with none (or one that wrote nothing), it is an error at once,
/// never a wait. An endless stream (`/dev/zero`) is read up to the size limit and one
/// byte more, like an oversized file.
///
/// # Errors
///
/// As [`read_deploy_file`]; for a named pipe nothing was written to, an error saying so.
///
/// ```
/// let err = bulkhead_config::read_input("/nonexistent/deploy.yaml").unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
/// # #[cfg(unix)]
/// assert!(bulkhead_config::read_input("/dev/null").unwrap().is_empty());
/// ```
pub fn read_input(path: impl AsRef<Path>) -> std::io::Result<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
        let path = path.as_ref();
        let kind = std::fs::metadata(path).map(|m| m.file_type());
        if let Ok(kind) = kind
            && (kind.is_fifo() || kind.is_char_device())
        {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)?;
            // Opened: from here on, reads wait for what a writer sends, until it closes.
            rustix::fs::fcntl_setfl(&file, rustix::fs::OFlags::empty())?;
            let text = read_text(&file)?;
            if text.is_empty() && kind.is_fifo() {
                return Err(Error::new(
                    ErrorKind::UnexpectedEof,
                    "it is a named pipe (FIFO) and nothing was written to it (no writer had \
                     it open)",
                ));
            }
            return Ok(text);
        }
    }
    read_deploy_file(path)
}

/// A file within the size limit that is not UTF-8: where its first invalid byte is.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("not-utf8-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("deploy.yaml");
/// std::fs::write(&path, b"bulkheads:\n  p: { max_wait: \"\xff\" }\n").unwrap();
/// let err = bulkhead_config::read_deploy_file(&path).unwrap_err();
/// let at = bulkhead_config::NotUtf8::of(&err).unwrap();
/// assert_eq!((at.line, at.column), (2, 19));
/// let report = at.diagnostics("deploy.yaml").to_string();
/// assert!(report.starts_with("deploy.yaml:2:19: error: "), "{report}");
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotUtf8 {
    /// 1-based line of the first byte that is not UTF-8.
    pub line: usize,
    /// 1-based column, in characters, of that byte.
    pub column: usize,
    /// Its offset in the file, in bytes.
    pub offset: usize,
    /// The byte.
    pub byte: u8,
}

impl NotUtf8 {
    /// Where `error`, of decoding `bytes` as UTF-8, is.
    pub fn at(bytes: &[u8], error: std::str::Utf8Error) -> Self {
        let offset = error.valid_up_to();
        // Valid up to `offset`, by the error's own account.
        let valid = std::str::from_utf8(&bytes[..offset]).unwrap_or_default();
        let line_start = valid.rfind('\n').map_or(0, |i| i + 1);
        NotUtf8 {
            line: valid.matches('\n').count() + 1,
            column: valid[line_start..].chars().count() + 1,
            offset,
            byte: bytes.get(offset).copied().unwrap_or_default(),
        }
    }

    /// The [`NotUtf8`] an error of [`read_deploy_file`] holds, if that is what it is.
    pub fn of(error: &Error) -> Option<&NotUtf8> {
        error.get_ref()?.downcast_ref()
    }

    /// The file's one error, placed at the byte: what the `bulkhead` command and the
    /// run-time deploy path report for the file.
    pub fn diagnostics(&self, file: impl Into<String>) -> Diagnostics {
        Diagnostics::from(vec![self.diagnostic(file, "file")])
    }

    /// The error of a `what` (`file`, `body`) named `source` whose bytes these are, placed
    /// at the byte: one diagnostic, for a file and for a deploy sent to the admin routes.
    pub fn diagnostic(&self, source: impl Into<String>, what: &str) -> Diagnostic {
        Diagnostic {
            line: self.line,
            column: self.column,
            ..Diagnostic::unplaced(Severity::Error, source, "", self.message(what))
        }
    }

    /// The message for a `what` (`file`, `body`) whose bytes these are: the one wording
    /// of the rule, for a file and for a deploy sent to the admin routes.
    pub fn message(&self, what: &str) -> String {
        format!(
            "the {what} is not UTF-8 text: byte {} (0x{:02x}), at this line and column, is not \
             part of a UTF-8 character; a config must be UTF-8, so save it as UTF-8",
            self.offset, self.byte
        )
    }
}

impl std::fmt::Display for NotUtf8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message("file"))
    }
}

impl std::error::Error for NotUtf8 {}

impl Diagnostics {
    /// What a config file that [`read_deploy_file`] could not read is reported as: a file that
    /// is not UTF-8 is an error at its first invalid byte ([`NotUtf8::diagnostics`]); any
    /// other reason is [`Diagnostics::unreadable`].
    pub fn of_read_error(file: impl Into<String>, error: &Error) -> Self {
        match NotUtf8::of(error) {
            Some(at) => at.diagnostics(file),
            None => Diagnostics::unreadable(file, error),
        }
    }
}

/// Refuses anything but a regular file, saying what it is.
fn not_special(metadata: &std::fs::Metadata) -> std::io::Result<()> {
    if metadata.is_file() {
        return Ok(());
    }
    let what = if metadata.is_dir() {
        "a directory"
    } else {
        special_kind(metadata)
    };
    Err(Error::new(
        ErrorKind::InvalidInput,
        format!("it is {what}, not a regular file"),
    ))
}

#[cfg(unix)]
fn special_kind(metadata: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    let kind = metadata.file_type();
    if kind.is_fifo() {
        "a named pipe (FIFO)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::Metadata) -> &'static str {
    "a special file"
}
