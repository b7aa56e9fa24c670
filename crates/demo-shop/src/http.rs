//! HTTP/1.1 with hyper: connections on tokio's two worker threads, each request's work on
//! the blocking pool (SQLite and the planted sleeps block), as servlet containers and most
//! Rust services with a synchronous database driver run it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::shop::Shop;
use crate::telemetry;

pub const ORDER_ROUTE: &str = "/orders/{id}";

pub fn serve(shop: Arc<Shop>, listen: SocketAddr, ready: &mut dyn FnMut(SocketAddr)) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("shop-io")
        .enable_all()
        .build()
        .context("cannot start the shop's runtime")?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        ready(listener.local_addr()?);
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(_) => continue, // a connection reset before accept: the next one
                },
                _ = term.recv() => break,
                _ = tokio::signal::ctrl_c() => break,
            };
            let _ = stream.set_nodelay(true);
            let shop = Arc::clone(&shop);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| handle(Arc::clone(&shop), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
        Ok(())
    })
}

async fn handle(
    shop: Arc<Shop>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    if path == "/health" {
        return Ok(reply(StatusCode::OK, "text/plain", b"ok\n".to_vec()));
    }
    let Some(order) = path
        .strip_prefix("/orders/")
        .and_then(|id| id.parse::<i64>().ok())
    else {
        return Ok(reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            b"not found\n".to_vec(),
        ));
    };
    let answered = tokio::task::spawn_blocking(move || {
        let cx = telemetry::server_span(shop.tracer(), ORDER_ROUTE, &path);
        let (status, body) = match shop.order_page(order, &cx) {
            Ok(Some(page)) => (StatusCode::OK, page),
            Ok(None) => (StatusCode::NOT_FOUND, b"no such order\n".to_vec()),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{e:#}\n").into_bytes(),
            ),
        };
        telemetry::end_server_span(&cx, status.as_u16());
        (status, body)
    })
    .await;
    Ok(match answered {
        Ok((status, body)) => reply(status, "text/html", body),
        Err(e) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("the handler failed: {e}\n").into_bytes(),
        ),
    })
}

fn reply(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, v);
    }
    response
}
