//! `vipflow status`: the agent's status document, fetched over plain HTTP/1.0 (no client
//! library needed) and read as the same type the agent serves.

use std::time::Duration;
use vipflow::status::StatusDoc;

/// GET /status from a running agent (plain HTTP/1.0 over TCP: no client library needed).
pub async fn fetch_status(addr: &str) -> Result<Option<StatusDoc>, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let connect = tokio::net::TcpStream::connect(addr);
    let mut s = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| format!("connect {addr}: timed out"))?
        .map_err(|e| {
            format!("connect {addr}: {e} (is the agent running with --http-addr {addr}?)")
        })?;
    s.write_all(format!("GET /status HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .map_err(|_| format!("{addr}: no answer"))?
        .map_err(|e| format!("{addr}: {e}"))?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr}: not an HTTP answer"))?;
    if !head.starts_with("HTTP/1.") || head.split_whitespace().nth(1).is_none_or(|c| c != "200") {
        return Err(format!("{addr}: {}", head.lines().next().unwrap_or("")));
    }
    serde_json::from_str(body).map_err(|e| format!("{addr}: bad status document: {e}"))
}
