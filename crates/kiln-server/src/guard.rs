//! Deployment safety: the API key check, CORS, the body read timeout (middleware on the
//! router), and the connection loop with its header/idle timeout and connection limit
//! (what `axum::serve` does, plus those limits).

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;

use crate::error::ApiError;
use crate::state::AppState;

/// Equal bytes, in time that depends only on `expected`'s length.
pub(crate) fn constant_time_eq(expected: &[u8], given: &[u8]) -> bool {
    let mut diff = expected.len() ^ given.len();
    for (i, &e) in expected.iter().enumerate() {
        diff |= usize::from(e ^ given.get(i).copied().unwrap_or(0));
    }
    std::hint::black_box(diff) == 0
}

/// The key a request presents: `Authorization: Bearer KEY`, else `x-api-key: KEY`.
fn presented_key(h: &HeaderMap) -> Option<&str> {
    if let Some(v) = h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        return Some(
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
                .unwrap_or(v)
                .trim(),
        );
    }
    h.get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// 401 in OpenAI's shape unless the request presents one of the configured keys
/// (`/health` is always open, `/metrics` when `metrics_public`, CORS preflights too).
pub(crate) async fn require_key(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let cfg = state.config();
    let path = req.uri().path();
    let open = cfg.api_keys.is_empty()
        || path == "/health"
        || (path == "/metrics" && cfg.metrics_public)
        || req.method() == Method::OPTIONS;
    if open {
        return next.run(req).await;
    }
    let ok = presented_key(req.headers()).is_some_and(|k| {
        // Every key is compared (no early exit), each in constant time.
        cfg.api_keys.iter().fold(false, |acc, key| {
            acc | constant_time_eq(key.as_bytes(), k.as_bytes())
        })
    });
    if ok {
        return next.run(req).await;
    }
    let message = if presented_key(req.headers()).is_some() {
        "Incorrect API key provided."
    } else {
        "You didn't provide an API key. Provide it in an Authorization header (Bearer KEY) or an x-api-key header."
    };
    ApiError {
        status: StatusCode::UNAUTHORIZED,
        message: message.into(),
        kind: "invalid_request_error",
        param: None,
        code: Some("invalid_api_key"),
    }
    .into_response()
}

/// CORS: a preflight from an allowed origin is answered 204 here; other responses from
/// an allowed origin get `Access-Control-Allow-Origin`. Origins not allowed get no CORS
/// headers (the browser then blocks the response).
pub(crate) async fn cors(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let origins = &state.config().cors_origins;
    let origin = req.headers().get(header::ORIGIN).cloned();
    let allowed = match &origin {
        Some(o) if !origins.is_empty() => {
            let any = origins.iter().any(|a| a == "*");
            if any || origins.iter().any(|a| o.as_bytes() == a.as_bytes()) {
                Some(if any {
                    HeaderValue::from_static("*")
                } else {
                    o.clone()
                })
            } else {
                None
            }
        }
        _ => None,
    };
    let Some(allow) = allowed else {
        return next.run(req).await;
    };
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut resp = if preflight {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            req.headers()
                .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                .cloned()
                .unwrap_or(HeaderValue::from_static(
                    "authorization, content-type, x-api-key",
                )),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        r
    } else {
        next.run(req).await
    };
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    h.append(header::VARY, HeaderValue::from_static("origin"));
    resp
}

/// Reads the whole body within `body_timeout` (408 `request_timeout` otherwise) and at
/// most `max_body_bytes` (413), then hands the buffered request on.
pub(crate) async fn read_body(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let cfg = state.config();
    let limit = cfg.max_body_bytes;
    let (parts, body) = req.into_parts();
    let read = async {
        let mut buf = Vec::new();
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::bad_request(format!("cannot read the request body: {e}"), None)
            })?;
            if buf.len() + chunk.len() > limit {
                return Err(ApiError::too_large(limit));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf)
    };
    match tokio::time::timeout(cfg.body_timeout, read).await {
        Ok(Ok(buf)) => next.run(Request::from_parts(parts, Body::from(buf))).await,
        Ok(Err(e)) => e.into_response(),
        Err(_) => ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "the request body did not arrive within {:.0} s (body_timeout)",
                cfg.body_timeout.as_secs_f64()
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_timeout"),
        }
        .into_response(),
    }
}

/// Serves `app` on `listener` over HTTP/1.1 until `shutdown` resolves, then waits for the
/// open connections to finish their requests. A connection is closed when its request head
/// (the first, or the next one after a response) has not arrived within `header_timeout`;
/// connections beyond `max_connections` are closed on accept.
pub(crate) async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()>,
    header_timeout: Duration,
    max_connections: usize,
) -> std::io::Result<()> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let permits = Arc::new(tokio::sync::Semaphore::new(max_connections));
    let mut shutdown = pin!(shutdown);
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    eprintln!("kiln serve: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let svc = TowerToHyperService::new(app.clone());
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(TokioIo::new(stream), svc);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_equal_only_when_identical() {
        assert!(constant_time_eq(b"sk-abc", b"sk-abc"));
        assert!(!constant_time_eq(b"sk-abc", b"sk-abd"));
        assert!(!constant_time_eq(b"sk-abc", b"sk-ab"));
        assert!(!constant_time_eq(b"sk-abc", b"sk-abcd"));
        assert!(!constant_time_eq(b"sk-abc", b""));
    }

    #[test]
    fn the_key_is_read_from_bearer_or_x_api_key() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k1"));
        assert_eq!(presented_key(&h), Some("k1"));
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_static("k2"));
        assert_eq!(presented_key(&h), Some("k2"));
        assert_eq!(presented_key(&HeaderMap::new()), None);
    }
}
