//! The admin router's write routes — `PUT /config` and `PATCH /bulkheads/{name}` — and
//! who may call them: a bearer token compared in constant time, every change logged.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, State};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderMap, StatusCode, header};

use super::access::{Denied, bearer};
use super::{Admin, NameInPath, not_found, problem};
use crate::config::{Diagnostic, Diagnostics, MAX_SOURCE_BYTES, Severity};
use crate::deploy::layers_over;
use crate::{Deploy, DeployError, ReloadReport};

/// Who asked for a change, for the log.
pub(super) struct Caller {
    peer: Option<SocketAddr>,
    user_agent: String,
}

impl std::fmt::Display for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.peer {
            Some(peer) => write!(f, "{peer}")?,
            None => f.write_str("an unknown address")?,
        }
        write!(f, " ({})", self.user_agent)
    }
}

/// A caller whose bearer token is the admin's write token: extracting it answers
/// `405`/`401`/`403` for the others, before the handler runs.
pub(super) struct Authorized(Caller);

impl FromRequestParts<Arc<Admin>> for Authorized {
    type Rejection = Denied;

    async fn from_request_parts(
        parts: &mut Parts,
        admin: &Arc<Admin>,
    ) -> Result<Self, Self::Rejection> {
        let Some(expected) = &admin.write_token else {
            return Err(Denied::NoWrites);
        };
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        let caller = caller(&parts.headers, peer);
        if expected.matches(bearer(&parts.headers)?) {
            Ok(Authorized(caller))
        } else {
            tracing::warn!(target: "bulkhead", who = %caller, "admin write refused: wrong token");
            Err(Denied::WrongToken)
        }
    }
}

fn caller(headers: &HeaderMap, peer: Option<SocketAddr>) -> Caller {
    Caller {
        peer,
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("no user agent")
            .to_owned(),
    }
}

/// Answers what a write did: the report (with `config`, the bulkhead's config in force,
/// for a PATCH), or `422` with every problem — each diagnostic placed in the request body.
fn answer(outcome: Result<serde_json::Value, DeployError>) -> Response {
    answer_as(outcome, StatusCode::UNPROCESSABLE_ENTITY)
}

/// [`answer`], with `invalid` the status of a deploy refused for its diagnostics.
fn answer_as(outcome: Result<serde_json::Value, DeployError>, invalid: StatusCode) -> Response {
    match outcome {
        Ok(report) => Json(report).into_response(),
        Err(DeployError::Invalid(diagnostics)) => refused(invalid, &diagnostics),
        Err(other) => problem(StatusCode::UNPROCESSABLE_ENTITY, other.to_string()),
    }
}

/// A write whose body is refused before it is read as a deploy: recorded as a refused
/// deploy (named `source`), like every other, and answered `status` with the diagnostic.
fn refuse_body(source: &str, status: StatusCode, diagnostic: Diagnostic) -> Response {
    let diagnostics = Diagnostics::from(vec![diagnostic]);
    let outcome = crate::deploy::apply(source, false, |_| Err(DeployError::Invalid(diagnostics)));
    answer_as(outcome.map(|r| report_json(&r)), status)
}

/// The write routes' body limit: a deploy file's (answered `413` by [`body_text`]).
pub(super) fn body_limit() -> axum::extract::DefaultBodyLimit {
    axum::extract::DefaultBodyLimit::max(MAX_SOURCE_BYTES)
}

/// A write's body as text, or why not: `413` over [`MAX_SOURCE_BYTES`] (the most a deploy
/// file may be; the router's body limit), `400` for a body that is not UTF-8 (placed at
/// its first bad byte) or could not be read.
fn body_text(
    layer: &str,
    body: Result<Bytes, BytesRejection>,
) -> Result<String, (StatusCode, Diagnostic)> {
    let unplaced = |message: String| Diagnostic::unplaced(Severity::Error, layer, "", message);
    let bytes = match body {
        Ok(bytes) => bytes,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            let message = format!(
                "the body is larger than {MAX_SOURCE_BYTES} bytes (1 MiB), the most a deploy \
                 may be"
            );
            return Err((StatusCode::PAYLOAD_TOO_LARGE, unplaced(message)));
        }
        Err(rejection) => {
            let message = format!("the body could not be read: {}", rejection.body_text());
            return Err((rejection.status(), unplaced(message)));
        }
    };
    String::from_utf8(bytes.into()).map_err(|e| {
        let at = bulkhead_config::NotUtf8::at(e.as_bytes(), e.utf8_error());
        (StatusCode::BAD_REQUEST, at.diagnostic(layer, "body"))
    })
}

/// `status` (`422` for a deploy that does not apply) with the diagnostics: `error` (every
/// problem, one per line) and `diagnostics` (`file`, `line`, `column`, `key_path`,
/// `severity`, `message` each).
fn refused(status: StatusCode, diagnostics: &Diagnostics) -> Response {
    let placed: Vec<serde_json::Value> = diagnostics
        .iter()
        .map(|d| {
            serde_json::json!({
                "file": d.file,
                "line": d.line,
                "column": d.column,
                "key_path": d.key_path,
                "severity": if d.is_error() { "error" } else { "warning" },
                "message": d.message,
            })
        })
        .collect();
    let body = serde_json::json!({ "error": diagnostics.to_string(), "diagnostics": placed });
    (status, Json(body)).into_response()
}

fn report_json(report: &ReloadReport) -> serde_json::Value {
    serde_json::to_value(report).unwrap_or_default()
}

/// `PUT /config`: the body is a deploy YAML, layered over every registered bulkhead as at
/// start-up; it replaces the deploy in force.
pub(super) async fn apply(
    State(admin): State<Arc<Admin>>,
    Authorized(caller): Authorized,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let layer = "PUT /config";
    let source = format!("{layer} by {caller}");
    let body = match body_text(layer, body) {
        Ok(text) => text,
        Err((status, diagnostic)) => return refuse_body(&source, status, diagnostic),
    };
    let deploy = Deploy::of_text(layer, &body, admin.env);
    answer(deploy.install_as(&source).map(|r| report_json(&r)))
}

/// Where a PATCH's body starts in the layer built from it: two lines down
/// (`bulkheads:`, the name), four columns in.
const PATCH_LINES: usize = 2;
const PATCH_INDENT: usize = 4;

/// `PATCH /bulkheads/{name}`: the body is a JSON object of the bulkhead's keys — a change
/// against the deploy in force, applied as one transaction under the registry's deploy
/// lock: the other bulkheads keep what the deploy in force gives them.
pub(super) async fn resize(
    NameInPath(name): NameInPath,
    Authorized(caller): Authorized,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if crate::registry().get(&name).is_none() {
        return not_found(&name);
    }
    let layer = format!("PATCH /bulkheads/{name}");
    let source = format!("{layer} by {caller}");
    let body = match body_text(&layer, body) {
        Ok(text) => text,
        Err((status, diagnostic)) => return refuse_body(&source, status, diagnostic),
    };
    if let Err(not_an_object) = serde_json::from_str::<serde_json::Map<_, _>>(&body) {
        let (line, column) = (not_an_object.line(), not_an_object.column());
        let message = format!(
            "the body is not a JSON object of the bulkhead's keys (such as \
             {{\"max_concurrent_calls\": 40}}): {}",
            json_reason(&not_an_object)
        );
        let mut placed = Diagnostic::unplaced(Severity::Error, &*layer, "", message);
        (placed.line, placed.column) = (line, column);
        return refuse_body(&source, StatusCode::UNPROCESSABLE_ENTITY, placed);
    }
    // JSON is YAML: the body, indented under its name, is a deploy layer of one bulkhead.
    let mut text = format!(
        "bulkheads:\n  {}:\n",
        serde_json::Value::from(name.as_str())
    );
    for line in body.lines() {
        text.push_str(&" ".repeat(PATCH_INDENT));
        text.push_str(line);
        text.push('\n');
    }
    let mut in_force = None;
    let outcome = crate::deploy::apply(&source, false, |base| {
        let change = layers_over(&base.running())
            .yaml(&layer, &text)
            .and_then(|layers| layers.deploy())
            .map_err(|diagnostics| DeployError::Invalid(in_body(&layer, diagnostics)))?
            .deploy;
        in_force = change.config().bulkheads.get(&name).cloned();
        // The deploy in force with this bulkhead's entry changed, the rest as they are.
        let deploy = base.in_force.clone().unwrap_or_default();
        Ok(deploy.with_entry_of(&name, change))
    });
    answer(outcome.map(|report| {
        let mut json = report_json(&report);
        json["config"] = serde_json::to_value(in_force.map(super::shown)).unwrap_or_default();
        json
    }))
}

/// The diagnostics of a PATCH's layer placed in the request body.
fn in_body(layer: &str, diagnostics: Diagnostics) -> Diagnostics {
    diagnostics
        .into_iter()
        .map(|mut d| {
            if d.file == layer && d.line > PATCH_LINES {
                d.line -= PATCH_LINES;
                d.column = d.column.saturating_sub(PATCH_INDENT);
            }
            d
        })
        .collect::<Vec<_>>()
        .into()
}

/// What serde_json says is wrong, without its "at line … column …" (the position is a
/// field of its own).
fn json_reason(error: &serde_json::Error) -> String {
    let text = error.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}
