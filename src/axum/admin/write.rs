//! The admin router's write routes — `PUT /config` and `PATCH /bulkheads/{name}` — and
//! who may call them: a bearer token compared in constant time, every change logged.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{FromRequestParts, Path, State};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderMap, StatusCode, header};
use subtle::ConstantTimeEq;

use super::{Admin, not_found, problem};
use crate::config::{Config, Layers};
use crate::{Deploy, DeployError};

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

/// Why a write was refused.
pub(super) enum Denied {
    /// No `Authorization: Bearer …` header: `401`.
    NoToken,
    /// Another token: `403`.
    WrongToken,
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        match self {
            Denied::NoToken => {
                let mut response = problem(
                    StatusCode::UNAUTHORIZED,
                    "this route changes bulkheads: send `Authorization: Bearer <token>`".into(),
                );
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    http::HeaderValue::from_static("Bearer"),
                );
                response
            }
            Denied::WrongToken => problem(
                StatusCode::FORBIDDEN,
                "the token is not the admin's write token".into(),
            ),
        }
    }
}

/// A caller whose bearer token is the admin's: extracting it answers `401`/`403` for the
/// others, before the handler runs.
pub(super) struct Authorized(Caller);

impl FromRequestParts<Arc<Admin>> for Authorized {
    type Rejection = Denied;

    async fn from_request_parts(
        parts: &mut Parts,
        admin: &Arc<Admin>,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        authorize(admin, &parts.headers, peer).map(Authorized)
    }
}

/// The caller, if its bearer token is the admin's (compared in constant time).
fn authorize(
    admin: &Admin,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
) -> Result<Caller, Denied> {
    let caller = caller(headers, peer);
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(Denied::NoToken)?;
    // The write routes exist only with a token; without one nothing matches.
    let expected = admin.write_token.as_deref().ok_or(Denied::WrongToken)?;
    if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
        Ok(caller)
    } else {
        tracing::warn!(target: "bulkhead", who = %caller, "admin write refused: wrong token");
        Err(Denied::WrongToken)
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

/// Applies `config` with [`reload`](crate::reload), logging who changed what.
fn apply_config(caller: &Caller, what: &str, config: &Config) -> Response {
    match crate::reload(config) {
        Ok(report) => {
            tracing::warn!(
                target: "bulkhead",
                who = %caller,
                resized = ?report.resized,
                "admin change applied: {what}"
            );
            Json(report).into_response()
        }
        Err(refused) => problem(StatusCode::UNPROCESSABLE_ENTITY, refused.to_string()),
    }
}

/// Counts a change refused before it reached the registry, and answers `422`.
fn invalid(diagnostics: String) -> Response {
    crate::registry().record_reload_failure(diagnostics.clone());
    problem(StatusCode::UNPROCESSABLE_ENTITY, diagnostics)
}

/// `PUT /config`: the body is a deploy YAML, layered over the declarations as at start-up.
pub(super) async fn apply(
    State(admin): State<Arc<Admin>>,
    Authorized(caller): Authorized,
    body: String,
) -> Response {
    let deploy = match Deploy::new().yaml("PUT /config", &body) {
        Ok(deploy) if admin.env => deploy.env(),
        Ok(deploy) => deploy,
        Err(diagnostics) => return invalid(diagnostics.to_string()),
    };
    if let Err(conflict) = crate::declarations().check() {
        return invalid(DeployError::from(conflict).to_string());
    }
    match deploy.resolve() {
        Ok(parsed) => apply_config(&caller, "a deploy config (PUT /config)", &parsed.config),
        Err(diagnostics) => invalid(diagnostics.to_string()),
    }
}

/// `PATCH /bulkheads/{name}`: the body is a JSON object of the bulkhead's keys, layered
/// over the config every bulkhead runs with now.
pub(super) async fn resize(
    Path(name): Path<String>,
    Authorized(caller): Authorized,
    body: String,
) -> Response {
    let registry = crate::registry();
    if registry.get(&name).is_none() {
        return not_found(&name);
    }
    let Ok(keys) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&body) else {
        return problem(
            StatusCode::BAD_REQUEST,
            "the body is a JSON object of the bulkhead's keys, e.g. {\"max_concurrent_calls\": 40}"
                .into(),
        );
    };
    // JSON is YAML: the change is a deploy layer of one bulkhead over the config every
    // bulkhead runs with now (so the others keep their sizes), checked like a deploy.
    let change = serde_json::json!({ "bulkheads": { &name: keys } }).to_string();
    let site = |name: &str| {
        crate::declarations()
            .get(name)
            .map(|d| d.declared_at().to_string())
    };
    let layers = Layers::over_declarations(&running_config(), site)
        .yaml(&format!("PATCH /bulkheads/{name}"), &change);
    match layers.and_then(|layers| layers.extract()) {
        Ok(config) => apply_config(
            &caller,
            &format!("bulkhead `{name}` set to {body} (PATCH)"),
            &config,
        ),
        Err(diagnostics) => invalid(diagnostics.to_string()),
    }
}

/// Every registered bulkhead with the config it runs with now.
fn running_config() -> Config {
    let registry = crate::registry();
    let mut config = Config::default();
    for name in registry.names() {
        if let Some(bulkhead) = registry.config(&name) {
            config.bulkheads.insert(name, bulkhead);
        }
    }
    config
}
