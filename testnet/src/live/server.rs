//! [`LiveServer`]: the page, its event stream and the testnet's Prometheus metrics, served by axum on a
//! thread and runtime of its own (the runs build and drop runtimes of their own, setting by setting).

use std::convert::Infallible;
use std::net::SocketAddr;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use futures::{Stream, StreamExt};
use node::telemetry::SharedRegistry;
use tokio::sync::broadcast::error::RecvError;

use super::feed::LiveFeed;

const PAGE: &str = include_str!("page.html");

#[derive(Clone)]
struct Shared {
    feed: LiveFeed,
    registry: SharedRegistry,
}

/// A running server. It serves until the process ends (it lives on its own thread).
#[derive(Debug)]
pub struct LiveServer {
    addr: SocketAddr,
}

impl LiveServer {
    /// Binds `addr` (here, so that a taken port is an error before the run starts) and serves on a thread
    /// of its own.
    pub fn start(
        addr: SocketAddr,
        feed: LiveFeed,
        registry: SharedRegistry,
    ) -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("--ui {addr}: cannot listen there"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let app = Router::new()
            .route("/", get(page))
            .route("/events", get(events))
            .route("/metrics", get(metrics))
            .with_state(Shared { feed, registry });
        std::thread::Builder::new()
            .name("live-view".into())
            .spawn(move || {
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => return eprintln!("live view: {e}"),
                    };
                    if let Err(e) = axum::serve(listener, app).await {
                        eprintln!("live view stopped: {e}");
                    }
                })
            })?;
        Ok(Self { addr })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The page's address, for the user.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

async fn page() -> Html<&'static str> {
    Html(PAGE)
}

/// Every event so far, then each new one as it comes. A page that fell too far behind has its stream
/// closed; the browser reconnects and gets everything again (the page starts over on `reset`).
async fn events(State(s): State<Shared>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (history, rx) = s.feed.subscribe();
    let replay = std::iter::once(Event::default().event("reset").data("{}"))
        .chain(history.into_iter().map(|e| Event::default().data(&*e)))
        .map(Ok);
    let live = futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(e) => Some((Ok(Event::default().data(&*e)), rx)),
            Err(RecvError::Lagged(_) | RecvError::Closed) => None,
        }
    });
    Sse::new(futures::stream::iter(replay).chain(live)).keep_alive(KeepAlive::default())
}

async fn metrics(State(s): State<Shared>) -> impl IntoResponse {
    let text = {
        let r = s.registry.lock().unwrap_or_else(|p| p.into_inner());
        node::telemetry::encode(&r)
    };
    (
        [(header::CONTENT_TYPE, node::telemetry::CONTENT_TYPE)],
        text,
    )
}
