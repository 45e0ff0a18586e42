//! The accept loop: hyper's HTTP/1 connections over the router, with a timer so a
//! request head must arrive within `--header-timeout` (a client that opens a
//! connection and sends part of a head, or nothing, does not hold it forever), and a
//! graceful shutdown that lets running exchanges finish. Each request carries its
//! connection's [`Peer`], so a handler can notice a client that has gone.

use std::future::Future;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// The client end of a request's connection, watched while its response is made.
#[derive(Clone)]
pub struct Peer(Arc<std::net::TcpStream>);

impl Peer {
    /// The client has closed its connection (or it failed): a peek at the socket
    /// finds end of file or an error. Bytes waiting (a next request) and no bytes yet
    /// both mean it is still there. Never blocks (the socket is non-blocking).
    pub fn gone(&self) -> bool {
        let mut b = [0u8; 1];
        match self.0.peek(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            ),
        }
    }
}

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
        // A second descriptor of the socket, only ever peeked at.
        let svc = match tcp.as_fd().try_clone_to_owned() {
            Ok(fd) => router
                .clone()
                .layer(axum::Extension(Peer(Arc::new(fd.into())))),
            Err(_) => router.clone(),
        };
        let conn = http.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(svc));
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
