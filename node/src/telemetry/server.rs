//! The HTTP endpoint: `GET /metrics` answers the registry as OpenMetrics text. It runs as a task on the
//! runtime that calls [`serve`] (the node's), so a scrape costs an encode of atomics under the registry's
//! lock and nothing on the round's path.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use super::SharedRegistry;
use super::exposition::{CONTENT_TYPE, encode};
use crate::{NodeError, Result};

/// A running endpoint; dropping it stops the server.
pub struct MetricsServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// The address it listens on (the port the system chose for `:0`).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds `addr` and serves `registry` at `/metrics` until the returned server is dropped. Must be called
/// within a tokio runtime.
pub async fn serve(addr: SocketAddr, registry: SharedRegistry) -> Result<MetricsServer> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| NodeError::Network(format!("metrics endpoint {addr}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| NodeError::Network(format!("metrics endpoint {addr}: {e}")))?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(registry);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(%addr, error = %e, "the metrics endpoint stopped");
        }
    });
    tracing::info!(%addr, "metrics endpoint: http://{addr}/metrics");
    Ok(MetricsServer { addr, task })
}

async fn metrics(State(registry): State<SharedRegistry>) -> impl IntoResponse {
    let text = {
        let r = registry.lock().unwrap_or_else(|p| p.into_inner());
        encode(&r)
    };
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text)
}
