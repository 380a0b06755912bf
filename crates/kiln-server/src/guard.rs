//! Deployment safety: the API key check, CORS, the body read timeout (middleware on the
//! router), and the connection loop with its header/idle timeout, write timeout,
//! connection limit and optional TLS (what `axum::serve` does, plus those limits).

use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::Watcher;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

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

/// The key a request presents: `Authorization: Bearer KEY` (or the bare key), else
/// `x-api-key: KEY`. Raw bytes: a value that is not text is a wrong key, not a missing one.
fn presented_key(h: &HeaderMap) -> Option<&[u8]> {
    if let Some(v) = h.get(header::AUTHORIZATION) {
        let v = v.as_bytes().trim_ascii();
        return Some(
            v.strip_prefix(b"Bearer ")
                .or_else(|| v.strip_prefix(b"bearer "))
                .unwrap_or(v)
                .trim_ascii(),
        );
    }
    h.get("x-api-key").map(|v| v.as_bytes().trim_ascii())
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
        cfg.api_keys
            .iter()
            .fold(false, |acc, key| acc | constant_time_eq(key.as_bytes(), k))
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

/// Connections over the limit being answered 503 at once; past this many, further ones
/// are closed without an answer (each refusal holds its socket for at most [`REFUSAL_LINGER`]).
const MAX_REFUSALS: usize = 64;
/// How long a refused connection is kept to deliver its 503: the answer is written, the
/// sending side shut, and what the client still sends is read and dropped until it closes
/// (closing with unread input would reset the connection and could lose the answer).
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// The most input read from a refused connection while it lingers.
const REFUSAL_DRAIN_BYTES: usize = 64 << 10;

/// The whole HTTP/1.1 answer to a connection over the limit: 503 in OpenAI's error shape,
/// `retry-after: 1`, `connection: close`.
fn refusal_response(max_connections: usize) -> Vec<u8> {
    let body = serde_json::json!({"error": {
        "message": format!(
            "the server is at its connection limit ({max_connections} open connections, \
             --max-connections); retry later"
        ),
        "type": "service_unavailable_error",
        "param": null,
        "code": "too_many_connections",
    }})
    .to_string();
    let mut r = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body.as_bytes());
    r
}

/// Answers a connection over the limit with `answer` and closes it (within
/// [`REFUSAL_LINGER`] whatever the client does).
async fn refuse(mut stream: tokio::net::TcpStream, answer: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deliver = async {
        stream.write_all(answer).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < REFUSAL_DRAIN_BYTES {
            match stream.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_LINGER, deliver).await;
}

/// A connection whose writes stall (the peer stopped reading and the socket buffers are
/// full) for longer than the timeout fails with `TimedOut`: hyper then closes it and drops
/// the response, which cancels its requests and frees their slots and KV blocks. A write
/// that makes progress restarts the clock; waiting for tokens to send is not a stall.
pub(crate) struct WriteTimeout<S> {
    inner: S,
    timeout: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteTimeout<S> {
    pub(crate) fn new(inner: S, timeout: Duration) -> Self {
        WriteTimeout {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// The result of a write attempt: pending starts (or continues) the stall clock.
    fn watch<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.stalled = None;
            return r;
        }
        if self.timeout.is_zero() {
            return Poll::Pending;
        }
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing for {timeout:?} (write timeout)"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(cx, r)
    }
}

/// How connections are accepted and guarded ([`serve_connections`]).
pub(crate) struct ConnectionLimits {
    /// The request head (first, or next after a response) must arrive within this.
    pub header_timeout: Duration,
    /// A write may stall this long (zero: forever).
    pub write_timeout: Duration,
    pub max_connections: usize,
    /// HTTPS instead of HTTP.
    pub tls: Option<crate::tls::TlsConfig>,
}

/// The answer to plain HTTP sent to the HTTPS port (then the connection is closed).
fn plain_http_response() -> Vec<u8> {
    let body = serde_json::json!({"error": {
        "message": "this port speaks HTTPS (TLS); the request was sent as plain HTTP",
        "type": "invalid_request_error",
        "param": null,
        "code": "tls_required",
    }})
    .to_string();
    let mut r = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body.as_bytes());
    r
}

/// The first byte of a TLS connection (a handshake record).
const TLS_HANDSHAKE: u8 = 0x16;

/// Serves one accepted connection: HTTP/1.1 over `io`, under the header timeout.
async fn serve_http<S>(io: S, app: Router, watcher: Watcher, header_timeout: Duration)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(io), svc);
    let _ = watcher.watch(conn).await;
}

/// The TLS handshake (within the header timeout), then HTTP. A connection whose first
/// byte is not a TLS handshake (plain HTTP) is answered 400 `tls_required` and closed.
async fn serve_tls(
    stream: WriteTimeout<tokio::net::TcpStream>,
    acceptor: tokio_rustls::TlsAcceptor,
    app: Router,
    watcher: Watcher,
    header_timeout: Duration,
    plain_answer: Arc<[u8]>,
) {
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(header_timeout, stream.inner.peek(&mut first)).await;
    match peeked {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => {}
        Ok(Ok(1)) => {
            refuse(stream.inner, &plain_answer).await;
            return;
        }
        _ => return,
    }
    let Ok(Ok(tls)) = tokio::time::timeout(header_timeout, acceptor.accept(stream)).await else {
        return;
    };
    serve_http(tls, app, watcher, header_timeout).await;
}

/// Serves `app` on `listener` over HTTP/1.1 (over TLS when `limits.tls` is set) until
/// `shutdown` resolves, then waits for the open connections to finish their requests. A
/// connection is closed when its request head (the first, or the next one after a
/// response) has not arrived within the header timeout, or when a write has stalled for
/// the write timeout; connections beyond `max_connections` are answered 503 and closed on
/// accept.
pub(crate) async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()>,
    limits: ConnectionLimits,
) -> std::io::Result<()> {
    let ConnectionLimits {
        header_timeout,
        write_timeout,
        max_connections,
        tls,
    } = limits;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let permits = Arc::new(tokio::sync::Semaphore::new(max_connections));
    let refusals = Arc::new(tokio::sync::Semaphore::new(MAX_REFUSALS));
    let refusal: Arc<[u8]> = refusal_response(max_connections).into();
    let plain_answer: Arc<[u8]> = plain_http_response().into();
    let acceptor = tls.map(|t| tokio_rustls::TlsAcceptor::from(t.0));
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
            // Over the limit: a 503 if few refusals are under way, else just the close.
            if let Ok(refusing) = Arc::clone(&refusals).try_acquire_owned() {
                let answer = Arc::clone(&refusal);
                tokio::spawn(async move {
                    refuse(stream, &answer).await;
                    drop(refusing);
                });
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let stream = WriteTimeout::new(stream, write_timeout);
        let watcher = graceful.watcher();
        let app = app.clone();
        match &acceptor {
            None => {
                tokio::spawn(async move {
                    serve_http(stream, app, watcher, header_timeout).await;
                    drop(permit);
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let plain = Arc::clone(&plain_answer);
                tokio::spawn(async move {
                    serve_tls(stream, acceptor, app, watcher, header_timeout, plain).await;
                    drop(permit);
                });
            }
        }
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
        assert_eq!(presented_key(&h), Some(&b"k1"[..]));
        let mut h = HeaderMap::new();
        h.insert("x-api-key", HeaderValue::from_static("k2"));
        assert_eq!(presented_key(&h), Some(&b"k2"[..]));
        assert_eq!(presented_key(&HeaderMap::new()), None);
        // Not text: presented (and wrong), not missing.
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_bytes(b"Bearer sk-\xff").unwrap(),
        );
        assert_eq!(presented_key(&h), Some(&b"sk-\xff"[..]));
    }

    #[test]
    fn the_refusal_is_a_complete_503_with_openais_error_body() {
        let r = refusal_response(7);
        let text = String::from_utf8(r).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(head.contains("connection: close"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "too_many_connections");
        assert_eq!(v["error"]["type"], "service_unavailable_error");
        assert!(v["error"]["message"].as_str().unwrap().contains('7'));
    }
}
