//! Who may call the admin router: a read token guarding the read routes (when there is
//! one), and the answers to a request refused before its handler runs.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};

use super::{Admin, problem};

/// Why a request was refused before its handler ran.
pub(super) enum Denied {
    /// No write token is configured: the write routes answer `405`.
    NoWrites,
    /// No `Authorization: Bearer …` header: `401`.
    NoToken,
    /// Another token: `403`.
    WrongToken,
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        match self {
            Denied::NoWrites => problem(
                StatusCode::METHOD_NOT_ALLOWED,
                "this admin router is read-only: the application turns writes on by giving it \
                 a write token"
                    .into(),
            ),
            Denied::NoToken => {
                let mut response = problem(
                    StatusCode::UNAUTHORIZED,
                    "this route needs a token: send `Authorization: Bearer <token>`".into(),
                );
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    http::HeaderValue::from_static("Bearer"),
                );
                response
            }
            Denied::WrongToken => problem(
                StatusCode::FORBIDDEN,
                "the token is not one this admin router accepts for this route".into(),
            ),
        }
    }
}

/// A write route of a build without the `deploy` feature: `405`, like a router without a
/// write token.
#[cfg(not(feature = "deploy"))]
pub(super) async fn no_writes() -> Response {
    Denied::NoWrites.into_response()
}

/// The bearer token of a request.
pub(super) fn bearer(headers: &HeaderMap) -> Result<&str, Denied> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(Denied::NoToken)
}

/// The read routes' guard: with a read token, a request needs it (or the write token).
pub(super) async fn read_access(
    State(admin): State<Arc<Admin>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(read) = &admin.read_token {
        let allowed = bearer(request.headers()).map(|given| {
            read.matches(given) || admin.write_token.as_ref().is_some_and(|w| w.matches(given))
        });
        match allowed {
            Ok(true) => {}
            Ok(false) => return Denied::WrongToken.into_response(),
            Err(denied) => return denied.into_response(),
        }
    }
    next.run(request).await
}
