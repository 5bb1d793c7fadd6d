//! `serve`'s HTTP side on axum (hyper, on a tokio runtime of its own thread): `GET /metrics`
//! (OpenMetrics to a client that asks for it, as Prometheus does; the classic text format to
//! anyone else) and `GET /ready` (200 once the first container listing is done; for liveness
//! and readiness probes alike: it answers while the exporter's loop and HTTP side live).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::render::prom::Metrics;

#[derive(Clone)]
struct Shared {
    metrics: Arc<Mutex<Metrics>>,
    ready: Arc<AtomicBool>,
}

/// Serves on `listener` (already bound, so a port in use was said before anything loaded) from
/// a thread of its own.
pub fn spawn(
    listener: std::net::TcpListener,
    metrics: Arc<Mutex<Metrics>>,
    ready: Arc<AtomicBool>,
) -> Result<()> {
    listener.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("starting the HTTP runtime")?;
    let app = Router::new()
        .route("/metrics", get(scrape))
        .route("/ready", get(is_ready))
        .fallback(|| async { (StatusCode::NOT_FOUND, "see /metrics\n") })
        .with_state(Shared { metrics, ready });
    std::thread::Builder::new()
        .name("np-serve-http".into())
        .spawn(move || {
            let served = rt.block_on(async move {
                let l = tokio::net::TcpListener::from_std(listener)?;
                axum::serve(l, app).await
            });
            if let Err(e) = served {
                log::error!("the metrics endpoint stopped: {e}");
            }
        })?;
    Ok(())
}

async fn scrape(State(s): State<Shared>, headers: HeaderMap) -> impl IntoResponse {
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let m = s.metrics.lock().unwrap_or_else(|e| e.into_inner());
    let (ctype, body) = if openmetrics {
        (
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            m.encode(),
        )
    } else {
        (
            "text/plain; version=0.0.4; charset=utf-8",
            m.encode_classic(),
        )
    };
    ([(header::CONTENT_TYPE, ctype)], body)
}

async fn is_ready(State(s): State<Shared>) -> impl IntoResponse {
    if s.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}
