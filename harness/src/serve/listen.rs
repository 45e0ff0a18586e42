//! The accept loop: hyper's HTTP/1 connections over the router, with a timer so a
//! request head must arrive within `--header-timeout` (a client that opens a
//! connection and sends part of a head, or nothing, does not hold it forever), and a
//! graceful shutdown that lets running exchanges finish. A client that closes its
//! connection mid-request is noticed by hyper (it reads for end of file while the
//! response is being made), which drops the handler and so frees the sequence.

use std::future::Future;
use std::time::Duration;

use anyhow::Result;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Serves `router` on `listener` until `shutdown` resolves, then waits for the open
/// connections to finish their exchanges (idle ones are closed at once).
///
/// `header_timeout`: the time a connection may take to send a complete request
/// head (the first, and each next one on a kept-alive connection); then hyper closes
/// it.
///
/// Errors: none once listening (a failed accept is retried after a pause, as
/// `axum::serve` does).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                // Out of descriptors and the like: pause rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        let conn =
            http.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(router.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // A connection's own errors (a client gone, a head too slow) end only it.
            let _ = conn.await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
