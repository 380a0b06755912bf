//! The router and serving: which handler answers each path, and the listener loop with
//! graceful shutdown on Ctrl-C / SIGTERM. Builds on `handlers.rs` and `state.rs`; neither
//! imports this module.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};

use crate::state::{AppState, Backend, ServerConfig};
use crate::{anthropic, embeddings, guard, handlers, infill, utility};

/// The routes: `/v1/completions`, `/v1/chat/completions` (and their `/render`, the token
/// ids without generating), `/v1/models`, `/health` (readiness), `/health/live`,
/// `/metrics`, `/tokenize`, `/detokenize`, `/apply-template`, `/v1/embeddings`,
/// `/embedding`, `/infill`, Anthropic's `/v1/messages` and `/v1/messages/count_tokens`;
/// behind CORS, the API key check and the body read timeout (`guard.rs`), whose errors on
/// Anthropic's paths are rewritten in Anthropic's shape.
pub fn router(state: AppState) -> Router {
    let limit = state.config().max_body_bytes;
    Router::new()
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/chat/completions", post(handlers::chat))
        .route("/v1/completions/render", post(handlers::completions_render))
        .route("/v1/chat/completions/render", post(handlers::chat_render))
        .route("/v1/models", get(handlers::models))
        .route("/health", get(handlers::health))
        .route("/health/live", get(handlers::live))
        .route("/metrics", get(handlers::metrics))
        .route("/tokenize", post(utility::tokenize))
        .route("/detokenize", post(utility::detokenize))
        .route("/apply-template", post(utility::apply_template))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/embeddings", post(embeddings::openai))
        .route("/embedding", post(embeddings::llama))
        .route("/infill", post(infill::infill))
        .fallback(handlers::not_found)
        .layer(DefaultBodyLimit::max(limit))
        // Outermost last: CORS (answers preflights), then the key, then the body read.
        .layer(from_fn_with_state(state.clone(), guard::read_body))
        .layer(from_fn_with_state(state.clone(), guard::require_key))
        .layer(from_fn_with_state(state.clone(), guard::cors))
        .layer(axum::middleware::from_fn(anthropic::error_shape))
        .with_state(state)
}

/// Serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
    #[error("loading the model failed: {0}")]
    Load(String),
}

/// Serves `router(state)` on `listener` until `shutdown` resolves; then answers `/health`
/// with 503 while still serving for `shutdown_delay`; then refuses new requests (503), lets running ones finish for up to `drain_timeout`, cancels what is
/// left, and stops the engine.
pub async fn run(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(state.clone());
    let st = state.clone();
    let signal = async move {
        shutdown.await;
        // Out of rotation first: `/health` says 503 while requests are still served for
        // the shutdown delay, so what routers sent before they noticed is not lost.
        st.begin_leaving();
        let delay = st.config().shutdown_delay;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        st.begin_shutdown();
        let drain = st.config().drain_timeout;
        tokio::spawn(async move {
            tokio::time::sleep(drain).await;
            if let Some(b) = st.backend() {
                let engine = b.engine.clone();
                let _ = tokio::task::spawn_blocking(move || engine.shutdown(false)).await;
            }
        });
    };
    let cfg = state.config();
    let limits = guard::ConnectionLimits {
        header_timeout: cfg.header_timeout,
        write_timeout: cfg.write_timeout,
        max_connections: cfg.max_connections,
        tls: cfg.tls.clone(),
    };
    guard::serve_connections(listener, app, signal, limits).await?;
    if let Some(b) = state.backend() {
        let engine = b.engine.clone();
        let _ = tokio::task::spawn_blocking(move || engine.shutdown(true)).await;
    }
    Ok(())
}

/// Binds `config.host:config.port`, answers `/health` with 503 while `load` runs (on a
/// blocking thread), then serves until Ctrl-C or SIGTERM (see [`run`]). `on_listen` is
/// told the bound address.
pub async fn serve<F>(
    config: ServerConfig,
    load: F,
    on_listen: impl FnOnce(SocketAddr),
) -> Result<(), ServerError>
where
    F: FnOnce() -> Result<Backend, String> + Send + 'static,
{
    let addr = format!("{}:{}", config.host, config.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: addr.clone(),
            source,
        })?;
    on_listen(listener.local_addr()?);
    let state = AppState::loading(config);
    let failed: Arc<Mutex<Option<String>>> = Arc::default();
    let (fail_tx, fail_rx) = tokio::sync::oneshot::channel::<()>();
    let st = state.clone();
    let failed_w = Arc::clone(&failed);
    tokio::task::spawn_blocking(move || match load() {
        Ok(b) => st.set_backend(b),
        Err(e) => {
            if let Ok(mut f) = failed_w.lock() {
                *f = Some(e);
            }
            let _ = fail_tx.send(());
        }
    });
    let shutdown = async move {
        // Resolves only when loading failed (a successful load drops the sender).
        let load_failed = async {
            if fail_rx.await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = termination() => {}
            _ = load_failed => {}
        }
    };
    run(listener, state, shutdown).await?;
    if let Some(e) = failed.lock().ok().and_then(|mut f| f.take()) {
        return Err(ServerError::Load(e));
    }
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn termination() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    eprintln!("kiln serve: shutting down (draining running requests)");
}
