//! `pods/portforward` over WebSocket, as the kube-apiserver and the kubelet
//! serve it to kubectl and to kube-rs (`Api::<Pod>::portforward`).
//!
//! The protocol (the kubelet's `cri/streaming/portforward/websocket.go` and
//! apimachinery's `wsstream`):
//!
//! * `GET /api/v1/namespaces/NS/pods/NAME/portforward?ports=P1,P2` with
//!   `Connection: Upgrade`, `Upgrade: websocket`, a `Sec-WebSocket-Key`
//!   and the subprotocols the client speaks in `Sec-WebSocket-Protocol`;
//!   the server picks the first of the client's list it supports
//!   (`v4.channel.k8s.io` binary, `v4.base64.channel.k8s.io`, or none
//!   named) and answers `101 Switching Protocols` naming it.
//! * Each port gets two channels: data `2i` and error `2i+1`. Every binary
//!   message starts with its channel's byte. The server first writes the
//!   port, a little-endian `u16`, on both channels of each port; then the
//!   data channel carries the bytes of the connection to that port of the
//!   pod both ways, and the error channel at most one text: why
//!   forwarding failed (`error forwarding port P to pod NAME, uid UID:
//!   ...`). When the pod's side closes, the WebSocket is closed.
//! * A missing pod is 404; a pod not yet on a node is 400 (`pod NAME does
//!   not have a host assigned`); a request without ports is 400.
//!
//! The stand-in has no kubelet and no pod network: it connects to the
//! pod's `status.podIP` (tests run the pod's process on 127.0.0.1 and give
//! the pod that IP), as the kubelet connects to the port inside the pod's
//! network namespace.

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::fake_apiserver::Body;

/// The subprotocols the kubelet's port-forward handler serves, in its
/// words.
const BINARY: &str = "v4.channel.k8s.io";
const BASE64: &str = "v4.base64.channel.k8s.io";

/// Whether the request is a WebSocket upgrade.
pub fn is_websocket(req: &Request<Incoming>) -> bool {
    let has = |name: &str, want: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(want)))
    };
    has("connection", "upgrade") && has("upgrade", "websocket")
}

/// The ports of `ports=80,443` (the parameter may also repeat).
pub fn parse_ports(values: &[&str]) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for v in values {
        if v.is_empty() {
            return Err("query parameter \"ports\" cannot be empty".into());
        }
        for p in v.split(',') {
            let port: u16 = p
                .parse()
                .map_err(|_| format!("unable to parse {v:?} as a port"))?;
            if port == 0 {
                return Err(format!("port {v:?} must be > 0"));
            }
            ports.push(port);
        }
    }
    if ports.is_empty() {
        return Err("query parameter \"ports\" is required".into());
    }
    Ok(ports)
}

/// The subprotocol to answer with: the first of the client's it supports
/// (`Some("")` when the client named none: the legacy binary framing).
pub fn choose_protocol(offered: Option<&str>) -> Option<&'static str> {
    let Some(offered) = offered.filter(|o| !o.trim().is_empty()) else {
        return Some("");
    };
    offered.split(',').map(str::trim).find_map(|p| match p {
        BINARY => Some(BINARY),
        BASE64 => Some(BASE64),
        _ => None,
    })
}

/// Answers the upgrade for `pod` (the stored object) and, once upgraded,
/// forwards `ports` to it. The caller has checked the pod and the ports.
pub fn upgrade(req: Request<Incoming>, pod: &Value, ports: Vec<u16>) -> Response<Body> {
    let offered = req
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let Some(protocol) = choose_protocol(offered.as_deref()) else {
        return plain(
            400,
            "unable to upgrade websocket connection: requested protocol(s) are not supported",
        );
    };
    let Some(key) = req
        .headers()
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
    else {
        return plain(
            400,
            "unable to upgrade websocket connection: missing Sec-WebSocket-Key",
        );
    };
    let accept = derive_accept_key(key.as_bytes());
    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let uid = pod["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ip = pod["status"]["podIP"]
        .as_str()
        .unwrap_or("127.0.0.1")
        .to_string();
    let base64 = protocol == BASE64;
    tokio::spawn(async move {
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        forward(ws, &name, &uid, &ip, &ports, base64).await;
    });
    let mut b = Response::builder()
        .status(101)
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Accept", accept);
    if !protocol.is_empty() {
        b = b.header("Sec-WebSocket-Protocol", protocol);
    }
    b.body(Full::new(Bytes::new()).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

fn plain(status: u16, text: &str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("Content-Type", "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(text.to_string())).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

/// One frame on `channel`, in the negotiated framing.
fn frame(channel: u8, data: &[u8], base64: bool) -> Message {
    if base64 {
        // The base64 framing: the channel as an ASCII digit, then the data
        // in standard base64, as a text message.
        let mut s = String::with_capacity(1 + data.len().div_ceil(3) * 4);
        s.push(char::from(b'0' + channel));
        s.push_str(&encode_base64(data));
        Message::text(s)
    } else {
        let mut v = Vec::with_capacity(data.len() + 1);
        v.push(channel);
        v.extend_from_slice(data);
        Message::binary(v)
    }
}

const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 of `data`, padded.
fn encode_base64(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The bytes of standard base64 `text` (padding optional); `None` when it
/// is not base64.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().filter(|c| *c != b'=') {
        let v = TABLE.iter().position(|t| *t == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// A client's frame: its channel and data, in the negotiated framing.
fn unframe(m: &Message, base64: bool) -> Option<(usize, Vec<u8>)> {
    match m {
        Message::Binary(b) if !base64 && b.len() > 1 => Some((usize::from(b[0]), b[1..].to_vec())),
        Message::Text(t) if base64 && t.len() > 1 => {
            let channel = usize::from(t.as_bytes()[0].checked_sub(b'0')?);
            Some((channel, decode_base64(&t.as_str()[1..])?))
        }
        _ => None,
    }
}

/// The forwarding of one upgraded connection: the port frames first, then
/// each port's bytes both ways; one connection to the pod per port, made
/// at once as the kubelet makes it.
async fn forward<S>(
    ws: WebSocketStream<S>,
    pod: &str,
    uid: &str,
    ip: &str,
    ports: &[u16],
    base64: bool,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = ws.split();
    for (i, port) in ports.iter().enumerate() {
        let data = (2 * i) as u8;
        for channel in [data, data + 1] {
            if sink
                .send(frame(channel, &port.to_le_bytes(), base64))
                .await
                .is_err()
            {
                return;
            }
        }
    }
    // Connections to the pod; a port that cannot be reached gets its error
    // and no connection.
    let mut writers = Vec::with_capacity(ports.len());
    let (to_ws, mut from_pods) = tokio::sync::mpsc::channel::<Option<Message>>(16);
    for (i, port) in ports.iter().enumerate() {
        let data = (2 * i) as u8;
        match TcpStream::connect((ip, *port)).await {
            Ok(conn) => {
                let (mut reader, writer) = conn.into_split();
                writers.push(Some(writer));
                let to_ws = to_ws.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 32 * 1024];
                    loop {
                        match reader.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if to_ws
                                    .send(Some(frame(data, &buf[..n], base64)))
                                    .await
                                    .is_err()
                                {
                                    return;
                                }
                            }
                        }
                    }
                    // The pod closed its side: the stream ends.
                    let _ = to_ws.send(None).await;
                });
            }
            Err(e) => {
                writers.push(None);
                let text = format!("error forwarding port {port} to pod {pod}, uid {uid}: {e}");
                let _ = to_ws
                    .send(Some(frame(data + 1, text.as_bytes(), base64)))
                    .await;
                let _ = to_ws.send(None).await;
            }
        }
    }
    drop(to_ws);
    loop {
        tokio::select! {
            out = from_pods.recv() => match out {
                Some(Some(m)) => {
                    if sink.send(m).await.is_err() {
                        return;
                    }
                }
                // A port's connection ended (or every sender is gone).
                Some(None) | None => {
                    let _ = sink.send(Message::Close(None)).await;
                    return;
                }
            },
            msg = stream.next() => match msg {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    for w in writers.iter_mut().flatten() {
                        let _ = w.shutdown().await;
                    }
                    return;
                }
                // Data for a port's data channel goes to its connection;
                // anything else (the error channels are the server's to
                // write) is dropped, as wsstream drops it.
                Some(Ok(m)) => {
                    if let Some((channel, data)) = unframe(&m, base64)
                        && channel % 2 == 0
                        && let Some(Some(w)) = writers.get_mut(channel / 2)
                        && w.write_all(&data).await.is_err()
                    {
                        return;
                    }
                }
            },
        }
    }
}

/// For `answer`'s callers: the response to a port-forward that cannot
/// start, as the API server words it.
pub fn refusal(status: u16, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(status)
        .header("Content-Type", "application/json")
        .body(Full::new(Bytes::from(bytes)).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_parse_as_the_kubelet_parses_them() {
        assert_eq!(parse_ports(&["80,1234"]).unwrap(), [80, 1234]);
        assert_eq!(parse_ports(&["80", "81"]).unwrap(), [80, 81]);
        assert_eq!(
            parse_ports(&[]).unwrap_err(),
            "query parameter \"ports\" is required"
        );
        assert!(parse_ports(&["0"]).unwrap_err().contains("must be > 0"));
        assert!(
            parse_ports(&["http"])
                .unwrap_err()
                .contains("unable to parse")
        );
    }

    #[test]
    fn the_first_supported_protocol_of_the_clients_list_is_chosen() {
        // kube-rs offers v5 first, which port-forwarding does not serve.
        assert_eq!(
            choose_protocol(Some("v5.channel.k8s.io, v4.channel.k8s.io")),
            Some(BINARY)
        );
        assert_eq!(
            choose_protocol(Some("v4.base64.channel.k8s.io")),
            Some(BASE64)
        );
        assert_eq!(choose_protocol(None), Some(""));
        assert_eq!(choose_protocol(Some("v5.channel.k8s.io")), None);
    }

    #[test]
    fn base64_frames_carry_the_channel_as_a_digit() {
        assert_eq!(frame(1, &[0x33, 0xc3], true), Message::text("1M8M="));
        assert_eq!(encode_base64(b"Man"), "TWFu");
        assert_eq!(
            frame(0, &[0x33, 0xc3], false),
            Message::binary(vec![0, 0x33, 0xc3])
        );
        for data in [&b""[..], b"M", b"Ma", b"Man", b"any carnal pleasure"] {
            assert_eq!(decode_base64(&encode_base64(data)).as_deref(), Some(data));
        }
        assert_eq!(
            unframe(&Message::text("0TWFu"), true),
            Some((0, b"Man".to_vec()))
        );
        assert_eq!(
            unframe(&Message::binary(vec![2, 7]), false),
            Some((2, vec![7]))
        );
    }
}
