//! A plain HTTP/1 GET over 127.0.0.1 with hyper's client, for the tests that scrape `/metrics`.

use std::net::SocketAddr;

use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;

/// `GET path` at `addr`: the status, the content type and the body as text.
pub async fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String, String)> {
    let err = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| err(&e))?;
    tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, addr.to_string())
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())
        .map_err(|e| err(&e))?;
    let res = send.send_request(req).await.map_err(|e| err(&e))?;
    let status = res.status().as_u16();
    let kind = res
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = res
        .into_body()
        .collect()
        .await
        .map_err(|e| err(&e))?
        .to_bytes();
    Ok((status, kind, String::from_utf8_lossy(&body).into_owned()))
}
