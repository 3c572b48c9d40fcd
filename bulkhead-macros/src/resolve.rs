//! Looking a bulkhead name up in the crate's config, for the attribute and `layer!`: the
//! declaration, or one error saying what is wrong in the user's terms (an unknown name with
//! the project's one "did you mean" rule, a missing or invalid config).
//!
//! Invariant: an invalid config is reported once per file, at the first use that expands.

use proc_macro2::Span;

use crate::config::{Declared, Loaded, Location};
use crate::ctxt::Ctxt;

/// Looks the name up in the config; reports a missing or invalid config or an unknown name.
pub(crate) fn resolve<'a>(
    cx: &mut Ctxt,
    loaded: &'a Loaded,
    name: &syn::LitStr,
    site: &str,
) -> Option<(&'a Declared, &'a Location)> {
    match loaded {
        Loaded::Valid {
            location,
            bulkheads,
        } => {
            let wanted = name.value();
            if let Some(declared) = bulkheads.get(&wanted) {
                return Some((declared, location));
            }
            let file = location.path.display();
            let help = match bulkhead_config::closest_name(
                &wanted,
                bulkheads.keys().map(String::as_str),
            ) {
                Some(close) => format!("did you mean `{close}`?"),
                None if bulkheads.is_empty() => {
                    "the file declares no bulkheads yet: add this one under `bulkheads:`"
                        .to_string()
                }
                None => format!(
                    "declare it under `bulkheads:` in that file, or use one it declares: {}",
                    bulkheads
                        .keys()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let message =
                format!("unknown bulkhead `{wanted}`: {file} does not declare it\nhelp: {help}");
            cx.error(name.span(), message);
            None
        }
        Loaded::Missing { location } => {
            cx.error(Span::call_site(), Loaded::missing_message(location));
            None
        }
        Loaded::Invalid {
            location,
            diagnostics,
            reported_at,
        } => {
            // One report for the file, at the first function that uses it (and again there
            // when that one is expanded again); the others are left as written.
            let mut first = reported_at.lock().unwrap_or_else(|p| p.into_inner());
            if first.get_or_insert_with(|| site.to_owned()) != site {
                return None;
            }
            cx.error(
                Span::call_site(),
                format!(
                    "the bulkhead config {} is invalid, so `#[bulkhead]` cannot check the \
                     functions that use it:\n{}",
                    location.path.display(),
                    diagnostics.trim_end()
                ),
            );
            None
        }
        Loaded::Failed { message } => {
            cx.error(Span::call_site(), message);
            None
        }
    }
}
