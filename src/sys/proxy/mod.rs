//! `ag-box __proxy`: a box's egress proxy. It listens on loopback inside the box's network
//! namespace and connects out from the host's, only where the box's policy admits
//! ([`crate::plan::egress`]): HTTP CONNECT tunnels and plain-HTTP forwarding, names resolved
//! here (the box has no DNS). Every decision is one line in the decision log. The policy and the
//! node's list are re-read when their files change, so `set` applies to a running box.

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

mod broker;
mod oauth;

use crate::plan::egress::{self, BoxPolicy, Decision, Host, Lookup, Policy};
use crate::sys::egress_log::{self, Record};
use crate::sys::{netns, privs};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A client that has not sent its request's headers by then is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once; the next wait in the listen queue (a box that opens thousands
/// costs itself, not the proxy's memory).
const MAX_CONNECTIONS: usize = 512;
/// The most a client connection's read buffer holds (headers included).
const MAX_BUF: usize = 64 * 1024;

/// Sent with every refusal; says why.
const REFUSED_HEADER: &str = "x-ag-box-refused";

/// Headers of one hop that a proxy must not pass on (RFC 9110 7.6.1), besides those `Connection` names.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
];

pub(crate) struct Paths {
    pub box_name: String,
    pub netns: PathBuf,
    pub policy: PathBuf,
    pub log: PathBuf,
    pub node_list: PathBuf,
    /// What the box's start left for the credential broker (none: nothing to stand in for).
    pub broker: PathBuf,
}

pub(crate) fn run(paths: Paths) -> Result<()> {
    let listener = netns::listen(&paths.netns, egress::PROXY_PORT)?;
    listener.set_nonblocking(true)?;
    let log = egress_log::Writer::open(&paths.log)?;
    let broker = broker::Broker::load(&paths.broker)?.map(Arc::new);
    // Joining the namespace was the last thing that needed a capability.
    privs::drop_capabilities()?;
    let state = Arc::new(State {
        box_name: paths.box_name,
        policy: PolicySource {
            policy: paths.policy,
            node_list: paths.node_list,
            cache: Mutex::new(None),
        },
        log,
        broker,
    });
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Name lookups block a thread each; a box cannot make the proxy spawn hundreds.
        .max_blocking_threads(16)
        .enable_all()
        .build()
        .context("starting the proxy's runtime")?
        .block_on(serve(listener, state))
}

struct State {
    box_name: String,
    policy: PolicySource,
    log: egress_log::Writer,
    broker: Option<Arc<broker::Broker>>,
}

/// A file's identity and version: a rewrite by rename changes the inode.
type Stamp = Option<(u64, i64, i64, u64)>;

fn stamp(path: &Path) -> Stamp {
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.ino(), m.mtime(), m.mtime_nsec(), m.len()))
}

/// A loaded policy (or why none could be) and the file versions it came from.
type Loaded = Arc<Result<Policy, String>>;
type Cached = (Stamp, Stamp, Loaded);

struct PolicySource {
    policy: PathBuf,
    node_list: PathBuf,
    cache: Mutex<Option<Cached>>,
}

impl PolicySource {
    /// The policy now in force; an unreadable one refuses everything (and says why).
    fn current(&self) -> Loaded {
        let stamps = (stamp(&self.policy), stamp(&self.node_list));
        let Ok(mut cache) = self.cache.lock() else {
            return Arc::new(Err("policy cache poisoned".into()));
        };
        if let Some((p, n, policy)) = cache.as_ref()
            && (*p, *n) == stamps
        {
            return policy.clone();
        }
        let policy = Arc::new(self.load());
        if let Err(why) = policy.as_ref() {
            tracing::warn!("egress policy: {why}; refusing everything until it is fixed");
        }
        *cache = Some((stamps.0, stamps.1, policy.clone()));
        policy
    }

    fn load(&self) -> Result<Policy, String> {
        let text = std::fs::read_to_string(&self.policy)
            .map_err(|e| format!("policy {} unreadable: {e}", self.policy.display()))?;
        let policy: BoxPolicy = serde_json::from_str(&text)
            .map_err(|e| format!("policy {} invalid: {e}", self.policy.display()))?;
        let node = match std::fs::read_to_string(&self.node_list) {
            Ok(text) => {
                let (entries, bad) = egress::parse_list(&text);
                for b in bad {
                    tracing::warn!("{}: {b} (skipped)", self.node_list.display());
                }
                entries
            }
            Err(e) => {
                tracing::warn!("{}: {e}; no node entries", self.node_list.display());
                vec![]
            }
        };
        policy.with_node_entries(node)
    }
}

async fn serve(listener: std::net::TcpListener, state: Arc<State>) -> Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let slot = slots.clone().acquire_owned().await?;
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors and the like: pass, rather than spin.
                tracing::warn!("accepting: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let reuse = Reuse::default();
        // Held by the connection and by any tunnel it becomes, which outlives it.
        let slot = Arc::new(slot);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                handle(req, state.clone(), reuse.clone(), slot.clone())
            });
            let served = hyper::server::conn::http1::Builder::new()
                .preserve_header_case(true)
                .title_case_headers(true)
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_BUF)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
            if let Err(e) = served {
                tracing::debug!("client connection: {e}");
            }
        });
    }
}

type Body = BoxBody<Bytes, hyper::Error>;

fn text_body(text: String) -> Body {
    Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed()
}

fn answer(status: StatusCode, reason: &str) -> Response<Body> {
    let mut resp = Response::new(text_body(format!("ag-box egress proxy: {reason}\n")));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    if status == StatusCode::FORBIDDEN
        && let Ok(v) = HeaderValue::from_str(reason)
    {
        h.insert(REFUSED_HEADER, v);
    }
    resp
}

/// One request's destination and what became of it, logged once it is over.
struct Attempt {
    state: Arc<State>,
    host: String,
    port: u16,
    method: String,
    /// The request's path without its query, where the proxy sees requests.
    path: Option<String>,
}

impl Attempt {
    fn log(&self, decision: Result<&str, &str>, error: Option<String>, bytes: (u64, u64)) {
        let (rule, reason) = match decision {
            Ok(rule) => (Some(rule.to_string()), None),
            Err(reason) => (None, Some(reason.to_string())),
        };
        // The system clock: the proxy is a process of its own, its log this node's.
        self.state.log.write(&Record {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            box_name: self.state.box_name.clone(),
            host: self.host.clone(),
            port: self.port,
            method: self.method.clone(),
            path: self.path.clone(),
            allowed: decision.is_ok(),
            rule,
            reason,
            error,
            bytes_out: bytes.0,
            bytes_in: bytes.1,
        });
    }

    /// Admitted, but the destination could not be reached.
    fn unreachable(&self, rule: &str, error: &str) -> Response<Body> {
        self.log(Ok(rule), Some(error.to_string()), (0, 0));
        answer(
            StatusCode::BAD_GATEWAY,
            &format!("{}:{}: {error}", self.host, self.port),
        )
    }

    fn refuse(&self, reason: &str) -> Response<Body> {
        self.log(Err(reason), None, (0, 0));
        answer(StatusCode::FORBIDDEN, reason)
    }

    /// The policy's decision, with names resolved here; Ok: the rule and where to connect.
    async fn decide(&self) -> Result<(String, Vec<SocketAddr>), String> {
        let host =
            Host::parse(&self.host).ok_or_else(|| format!("invalid host '{}'", self.host))?;
        let policy = self.state.policy.current();
        let policy = policy.as_ref().as_ref().map_err(Clone::clone)?;
        let decision = match policy.decide(&host, self.port) {
            Lookup::Done(d) => d,
            Lookup::Resolve { rule } => {
                let name = host.to_string();
                let resolved: Vec<IpAddr> = tokio::net::lookup_host((name.as_str(), self.port))
                    .await
                    .map(|addrs| addrs.map(|a| a.ip()).collect())
                    .unwrap_or_default();
                policy.admit(rule, &name, self.port, &resolved)
            }
        };
        match decision {
            Decision::Allow { rule, addrs } => Ok((
                rule,
                addrs
                    .into_iter()
                    .map(|a| SocketAddr::new(a, self.port))
                    .collect(),
            )),
            Decision::Refuse { reason } => Err(reason),
        }
    }
}

/// The first of `addrs` that answers.
async fn dial(addrs: &[SocketAddr]) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for addr in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = e,
            Err(_) => last = io::Error::new(io::ErrorKind::TimedOut, format!("{addr}: timed out")),
        }
    }
    Err(last)
}

async fn handle(
    req: Request<Incoming>,
    state: Arc<State>,
    reuse: Reuse,
    slot: Arc<tokio::sync::OwnedSemaphorePermit>,
) -> Result<Response<Body>, Infallible> {
    let uri = req.uri();
    let target = match (
        req.method() == Method::CONNECT,
        uri.authority(),
        uri.scheme_str(),
    ) {
        (true, Some(a), _) => a.port_u16().map(|p| (a.host().to_string(), p)),
        (false, Some(a), Some("http")) => Some((a.host().to_string(), a.port_u16().unwrap_or(80))),
        _ => None,
    };
    let Some((host, port)) = target else {
        return Ok(answer(
            StatusCode::BAD_REQUEST,
            "send requests through HTTP_PROXY: CONNECT host:port, or an absolute http:// URL",
        ));
    };
    let attempt = Attempt {
        state,
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
        method: req.method().to_string(),
        path: (req.method() != Method::CONNECT).then(|| uri.path().to_string()),
    };
    if req.method() != Method::CONNECT
        && let Some(h) = req.headers().get(header::HOST)
        && !h
            .to_str()
            .is_ok_and(|h| egress::host_header_matches(h, &attempt.host, port))
    {
        let shown = String::from_utf8_lossy(h.as_bytes()).into_owned();
        return Ok(attempt.refuse(&format!(
            "Host header '{shown}' names another host than the request's {}:{port}",
            attempt.host
        )));
    }
    // Decided for every request, also on a reused connection: a policy change applies at once.
    let (rule, addrs) = match attempt.decide().await {
        Ok(d) => d,
        Err(reason) => return Ok(attempt.refuse(&reason)),
    };
    let broker = attempt.state.broker.clone();
    if req.method() != Method::CONNECT {
        if let Some(reason) = broker
            .as_ref()
            .and_then(|b| b.refuses_plain(&req, &attempt.host, port))
        {
            return Ok(attempt.refuse(&reason));
        }
        return Ok(forward(req, attempt, rule, &addrs, reuse).await);
    }
    if let Some(b) = broker.filter(|b| b.terminates(&attempt.host, port)) {
        return Ok(broker::terminate(req, attempt, rule, b, slot));
    }
    let mut upstream = match dial(&addrs).await {
        Ok(s) => Counted::new(s),
        Err(e) => return Ok(attempt.unreachable(&rule, &format!("connecting: {e}"))),
    };
    let bytes = upstream.counters();
    tokio::spawn(async move {
        let _slot = slot;
        let error = match hyper::upgrade::on(req).await {
            Ok(client) => tokio::io::copy_bidirectional(&mut TokioIo::new(client), &mut upstream)
                .await
                .err()
                .map(|e| format!("tunnel: {e}")),
            Err(e) => Some(format!("upgrade: {e}")),
        };
        attempt.log(Ok(&rule), error, bytes.get());
    });
    Ok(Response::new(text_body(String::new())))
}

/// A client connection's upstream for plain HTTP, kept for its next request to the same place
/// (a fresh connection per request would leave the node full of `TIME_WAIT` sockets).
struct Upstream {
    to: (String, u16),
    sender: SendRequest<Incoming>,
    bytes: Counters,
}

type Reuse = Arc<Mutex<Option<Upstream>>>;

async fn connect_upstream(to: (String, u16), addrs: &[SocketAddr]) -> Result<Upstream, String> {
    let stream = Counted::new(dial(addrs).await.map_err(|e| format!("connecting: {e}"))?);
    let bytes = stream.counters();
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .title_case_headers(true)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("upstream connection: {e}");
        }
    });
    Ok(Upstream { to, sender, bytes })
}

/// Plain HTTP: the request in origin form, the answer streamed back and logged when it ends.
async fn forward(
    mut req: Request<Incoming>,
    attempt: Attempt,
    rule: String,
    addrs: &[SocketAddr],
    reuse: Reuse,
) -> Response<Body> {
    let to = (attempt.host.clone(), attempt.port);
    let kept = reuse
        .lock()
        .ok()
        .and_then(|mut k| k.take())
        .filter(|u| u.to == to && !u.sender.is_closed());
    let ready = match kept {
        Some(mut u) => u.sender.ready().await.is_ok().then_some(u),
        None => None,
    };
    let mut upstream = match ready {
        Some(u) => u,
        None => match connect_upstream(to, addrs).await {
            Ok(u) => u,
            Err(e) => return attempt.unreachable(&rule, &e),
        },
    };
    let origin = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .unwrap_or_default();
    *req.uri_mut() = origin;
    strip_hop_by_hop(req.headers_mut());
    // What was judged, whatever the box sent (`handle` refused a Host naming anything else),
    // built from the judged host and port alone: an authority's userinfo never goes out.
    if let Ok(v) = HeaderValue::from_str(&egress::host_header(&attempt.host, attempt.port)) {
        req.headers_mut().insert(header::HOST, v);
    }
    let before = upstream.bytes.get();
    let bytes = upstream.bytes.clone();
    let since = move || {
        let now = bytes.get();
        (now.0 - before.0, now.1 - before.1)
    };
    match upstream.sender.send_request(req).await {
        Ok(mut resp) => {
            if let Ok(mut k) = reuse.lock() {
                *k = Some(upstream);
            }
            strip_hop_by_hop(resp.headers_mut());
            resp.map(|inner| {
                LoggedBody {
                    inner,
                    error: None,
                    on_end: Some(Box::new(move |error| {
                        attempt.log(Ok(&rule), error, since());
                    })),
                }
                .boxed()
            })
        }
        Err(e) => {
            attempt.log(Ok(&rule), Some(format!("exchange: {e}")), since());
            answer(StatusCode::BAD_GATEWAY, &format!("{e}"))
        }
    }
}

/// A response body that logs its request's decision once it has been passed on (or dropped).
struct LoggedBody {
    inner: Incoming,
    error: Option<String>,
    on_end: Option<Box<dyn FnOnce(Option<String>) + Send + Sync>>,
}

impl hyper::body::Body for LoggedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(e))) = &polled {
            self.error = Some(format!("exchange: {e}"));
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        if let Some(log) = self.on_end.take() {
            log(self.error.take());
        }
    }
}

fn strip_hop_by_hop(headers: &mut hyper::HeaderMap) {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    for name in HOP_BY_HOP
        .iter()
        .copied()
        .chain(named.iter().map(String::as_str))
    {
        headers.remove(name);
    }
}

/// Bytes to (out) and from (in) a destination.
#[derive(Clone, Default)]
struct Counters(Arc<(AtomicU64, AtomicU64)>);

impl Counters {
    fn get(&self) -> (u64, u64) {
        (
            self.0.0.load(Ordering::Relaxed),
            self.0.1.load(Ordering::Relaxed),
        )
    }
}

/// The connection to a destination, counting what passes.
struct Counted {
    stream: TcpStream,
    counters: Counters,
}

impl Counted {
    fn new(stream: TcpStream) -> Counted {
        Counted {
            stream,
            counters: Counters::default(),
        }
    }
    fn counters(&self) -> Counters {
        self.counters.clone()
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.counters.0.1.fetch_add(n as u64, Ordering::Relaxed);
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.counters.0.0.fetch_add(n as u64, Ordering::Relaxed);
        }
        polled
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    //! The proxy's HTTP handling on loopback (no namespaces): policy, forwarding, tunnels, log.

    use super::*;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpListener};

    /// An upstream that answers each request with `hello` and hands back what it received.
    fn upstream() -> (u16, std::sync::mpsc::Receiver<String>) {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let mut s = s.unwrap();
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).unwrap();
                let got = String::from_utf8_lossy(&buf[..n]).into_owned();
                let raw = got.starts_with("RAW");
                let _ = tx.send(got);
                let reply: &[u8] = if raw {
                    b"RAW-ECHO"
                } else {
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
                };
                s.write_all(reply).unwrap();
            }
        });
        (port, rx)
    }

    struct Proxy {
        port: u16,
        dir: tempfile::TempDir,
    }

    impl Proxy {
        fn start(policy: &str) -> Proxy {
            Proxy::start_with(policy, None)
        }

        fn start_with(policy: &str, broker: Option<broker::Broker>) -> Proxy {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("egress.json"), policy).unwrap();
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            listener.set_nonblocking(true).unwrap();
            let port = listener.local_addr().unwrap().port();
            let state = Arc::new(State {
                box_name: "t".into(),
                policy: PolicySource {
                    policy: dir.path().join("egress.json"),
                    node_list: dir.path().join("no-node-list"),
                    cache: Mutex::new(None),
                },
                log: egress_log::Writer::open(&dir.path().join("egress.log")).unwrap(),
                broker: broker.map(Arc::new),
            });
            std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(serve(listener, state))
            });
            Proxy { port, dir }
        }

        /// The box's policy from now on: these entries.
        fn allow(&self, entries: &[String]) {
            let file = self.dir.path().join("egress.json");
            crate::atomic::write(&file, policy(entries).as_bytes(), 0o600).unwrap();
        }

        /// Send `head` (and then `then`, once an answer head came back); everything read until EOF.
        fn exchange(&self, head: &str, then: Option<&[u8]>) -> String {
            let mut s = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(head.as_bytes()).unwrap();
            let mut got = Vec::new();
            if let Some(more) = then {
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
                s.write_all(more).unwrap();
                s.shutdown(std::net::Shutdown::Write).unwrap();
            }
            let _ = s.read_to_end(&mut got);
            String::from_utf8_lossy(&got).into_owned()
        }

        /// The logged decisions, once `n` are there.
        fn log(&self, n: usize) -> Vec<Record> {
            for _ in 0..200 {
                let all = egress_log::read(&self.dir.path().join("egress.log"));
                if all.len() >= n {
                    return all;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            panic!("fewer than {n} decisions logged");
        }
    }

    fn policy(entries: &[String]) -> String {
        serde_json::json!({"mode": "allow", "allow": entries}).to_string()
    }

    #[test]
    fn plain_http_is_forwarded_in_origin_form_without_hop_by_hop_headers() {
        let (port, received) = upstream();
        let proxy = Proxy::start(&policy(&[format!("127.0.0.1:{port}")]));
        let answer = proxy.exchange(
            &format!(
                "GET http://127.0.0.1:{port}/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
                 Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\n\
                 Connection: close, X-Hop\r\nX-Hop: 1\r\nX-Kept: 2\r\n\r\n"
            ),
            None,
        );
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("hello"), "{answer}");
        let request = received.recv().unwrap();
        assert!(request.starts_with("GET /x?y=1 HTTP/1.1\r\n"), "{request}");
        assert!(request.contains("X-Kept: 2"), "{request}");
        for gone in [
            "Proxy-Connection",
            "Proxy-Authorization",
            "X-Hop:",
            "c2VjcmV0",
        ] {
            assert!(!request.contains(gone), "{gone} passed on: {request}");
        }
        let log = proxy.log(1);
        assert_eq!(
            log[0],
            Record {
                time: log[0].time.clone(),
                box_name: "t".into(),
                host: "127.0.0.1".into(),
                port,
                method: "GET".into(),
                path: Some("/x".into()),
                allowed: true,
                rule: Some(format!("127.0.0.1:{port}")),
                reason: None,
                error: None,
                bytes_out: log[0].bytes_out,
                bytes_in: 62,
            }
        );
        assert!(log[0].bytes_out > 0);
    }

    #[test]
    fn a_connect_tunnel_relays_bytes_both_ways() {
        let (port, received) = upstream();
        let proxy = Proxy::start(&policy(&[format!("127.0.0.1:{port}")]));
        let answer = proxy.exchange(
            &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"),
            Some(b"RAW-PING"),
        );
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("RAW-ECHO"), "{answer}");
        assert_eq!(received.recv().unwrap(), "RAW-PING");
        let log = proxy.log(1);
        assert_eq!((log[0].method.as_str(), log[0].allowed), ("CONNECT", true));
        assert_eq!((log[0].bytes_out, log[0].bytes_in), (8, 8));
    }

    #[test]
    fn refusals_are_403_with_the_reason_and_are_logged_at_once() {
        let (port, _received) = upstream();
        let proxy = Proxy::start(&policy(&[]));
        for (head, reason) in [
            (
                format!(
                    "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
                ),
                format!("loopback address 127.0.0.1:{port} is not listed"),
            ),
            (
                "CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                    .to_string(),
                "cloud metadata address 169.254.169.254:80 is not listed".to_string(),
            ),
            (
                "CONNECT localhost:22 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_string(),
                "localhost:22 is not listed".to_string(),
            ),
        ] {
            let answer = proxy.exchange(&head, None);
            assert!(answer.starts_with("HTTP/1.1 403 Forbidden"), "{answer}");
            assert!(
                answer.contains(&format!("X-Ag-Box-Refused: {reason}\r\n")),
                "{answer}"
            );
        }
        let log = proxy.log(3);
        assert_eq!(
            log.iter()
                .map(|r| (r.allowed, r.reason.clone().unwrap_or_default()))
                .collect::<Vec<_>>(),
            vec![
                (
                    false,
                    format!("loopback address 127.0.0.1:{port} is not listed")
                ),
                (
                    false,
                    "cloud metadata address 169.254.169.254:80 is not listed".into()
                ),
                (false, "localhost:22 is not listed".into()),
            ]
        );
    }

    #[test]
    fn a_policy_change_applies_to_the_next_request_and_a_broken_one_refuses_all() {
        let (port, _received) = upstream();
        let proxy = Proxy::start(&policy(&[]));
        let get = format!(
            "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        );
        assert!(proxy.exchange(&get, None).starts_with("HTTP/1.1 403"));
        proxy.allow(&[format!("127.0.0.1:{port}")]);
        assert!(proxy.exchange(&get, None).starts_with("HTTP/1.1 200"));
        let file = proxy.dir.path().join("egress.json");
        crate::atomic::write(&file, b"{not json", 0o600).unwrap();
        let answer = proxy.exchange(&get, None);
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(answer.contains("invalid"), "{answer}");
    }

    #[test]
    fn requests_not_meant_for_a_proxy_get_400() {
        let proxy = Proxy::start(&policy(&[]));
        let answer = proxy.exchange(
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            None,
        );
        assert!(answer.starts_with("HTTP/1.1 400 Bad Request"), "{answer}");
        let answer = proxy.exchange(
            "CONNECT example.com HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            None,
        );
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    }

    /// A TLS server for `localhost` (its certificate by a CA of its own, returned as roots)
    /// that answers every request with the request's head as received.
    fn tls_upstream() -> (u16, rustls::RootCertStore) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_cert.der().clone()).unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(
                    vec![cert.der().clone()],
                    rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
                )
                .unwrap(),
        );
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let conn = rustls::ServerConnection::new(config.clone()).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, s.unwrap());
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && tls.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    head.len()
                );
                let _ = tls.write_all(reply.as_bytes());
                let _ = tls.write_all(&head);
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        (port, roots)
    }

    const REAL: &str = "gho_REALTOKENREALTOKENREALTOKENREALTOKEN";
    const SHOWN: &str = "gho_placeholderplaceholderplaceholder12";

    /// A proxy whose broker stands in for gh on `localhost:port` (upstream trusted by `roots`),
    /// and the node CA's certificate the box trusts.
    fn brokered_proxy(
        port: u16,
        roots: rustls::RootCertStore,
    ) -> (Proxy, String, tempfile::TempDir) {
        use crate::plan::broker::{BrokerFile, Rule, Secret};
        let ca_dir = tempfile::tempdir().unwrap();
        let hosts = vec!["localhost".to_string()];
        let ca = crate::sys::node_ca::ensure(&ca_dir.path().join("ca"), &hosts).unwrap();
        let (cert_pem, key_pem) = ca.issue(&hosts, &hosts).unwrap();
        let file = BrokerFile {
            rules: vec![Rule {
                login: "gh".into(),
                hosts: hosts.clone(),
            }],
            secrets: vec![
                Secret {
                    login: "gh".into(),
                    placeholder: SHOWN.into(),
                    real: REAL.into(),
                    bearer_only: false,
                    hosts: Vec::new(),
                    key_header: None,
                },
                Secret {
                    login: "codex".into(),
                    placeholder: "sk-codexplaceholder".into(),
                    real: "sk-codexreal".into(),
                    bearer_only: false,
                    hosts: Vec::new(),
                    key_header: None,
                },
            ],
            cert_pem,
            key_pem,
            port,
            oauth: vec![],
        };
        let proxy = Proxy::start_with(
            &policy(&[format!("localhost:{port}"), format!("127.0.0.1:{port}")]),
            Some(broker::Broker::new(file, roots).unwrap()),
        );
        (proxy, ca.cert_pem.clone(), ca_dir)
    }

    const ACCESS_SHOWN: &str = "sk-ant-oat01-shownshownshown";
    const REFRESH_SHOWN: &str = "sk-ant-ort01-shownshownshown";

    /// A proxy whose broker stands in for a Claude OAuth login on `localhost:port` (its token
    /// endpoint there too), the login's file in the returned dir, its access token expired.
    /// Its refresher is the script `refresher` makes of the dir (`sys::oauth_refresh` has tests
    /// of its own), run with the login's file and `refreshes` (a count of its runs) as $1, $2.
    fn oauth_proxy(
        port: u16,
        roots: rustls::RootCertStore,
        refresher: impl FnOnce(&Path) -> String,
    ) -> (Proxy, String, tempfile::TempDir) {
        use crate::plan::broker::{BrokerFile, OauthAccount, Rule};
        let dir = tempfile::tempdir().unwrap();
        let hosts = vec!["localhost".to_string()];
        let ca = crate::sys::node_ca::ensure(&dir.path().join("ca"), &hosts).unwrap();
        let (cert_pem, key_pem) = ca.issue(&hosts, &hosts).unwrap();
        let file = dir.path().join("credentials.json");
        std::fs::write(
            &file,
            r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-OLD","refreshToken":"sk-ant-ort01-OLD","expiresAt":1000,"scopes":["user:inference"]}}"#,
        )
        .unwrap();
        let script = refresher(dir.path());
        let broker_file = BrokerFile {
            rules: vec![Rule {
                login: "claude".into(),
                hosts: hosts.clone(),
            }],
            secrets: vec![],
            cert_pem,
            key_pem,
            port,
            oauth: vec![OauthAccount {
                login: "claude".into(),
                row: "claude-oauth".into(),
                shape: crate::plan::oauth::Shape::Claude,
                access: ACCESS_SHOWN.into(),
                refresh: REFRESH_SHOWN.into(),
                id: None,
                account_id: None,
                captures: false,
                file: file.clone(),
                token_host: "localhost".into(),
                token_path: "/v1/oauth/token".into(),
                client_id: "client".into(),
                refresher: crate::plan::broker::Refresher {
                    argv: vec![
                        "/bin/sh".into(),
                        "-c".into(),
                        script,
                        "refresher".into(),
                        file.display().to_string(),
                        dir.path().join("refreshes").display().to_string(),
                    ],
                    env: vec![],
                },
            }],
        };
        let proxy = Proxy::start_with(
            &policy(&[format!("localhost:{port}"), format!("127.0.0.1:{port}")]),
            Some(broker::Broker::new(broker_file, roots).unwrap()),
        );
        (proxy, ca.cert_pem.clone(), dir)
    }

    #[test]
    fn an_oauth_login_is_refreshed_by_the_broker_once_and_the_box_keeps_its_placeholders() {
        let (port, roots) = tls_upstream();
        let far = (SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 3600)
            * 1000;
        // Writes a new login, as `ag-box __refresh` would.
        let (proxy, ca_pem, dir) = oauth_proxy(port, roots, |_| {
            format!(
                r#"printf '%s' '{{"claudeAiOauth":{{"accessToken":"sk-ant-oat01-NEW","refreshToken":"sk-ant-ort01-NEW","expiresAt":{far}}}}}' > "$1"; echo run >> "$2""#
            )
        });
        let runs = || {
            std::fs::read_to_string(dir.path().join("refreshes"))
                .unwrap_or_default()
                .lines()
                .count()
        };
        let mut tls = tls_to(&proxy, port, &ca_pem);
        let get = format!(
            "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {ACCESS_SHOWN}\r\n\r\n"
        );
        tls.write_all(get.as_bytes()).unwrap();
        let first = answer_on(&mut tls);
        assert!(
            first.starts_with("HTTP/1.1 200")
                && first.contains("authorization: Bearer sk-ant-oat01-NEW\r\n"),
            "{first}"
        );
        // The next request uses it as it is.
        tls.write_all(get.as_bytes()).unwrap();
        let second = answer_on(&mut tls);
        assert!(second.contains("Bearer sk-ant-oat01-NEW\r\n"), "{second}");
        assert_eq!(runs(), 1);
        // The box's own refresh of its placeholder is answered here with its placeholders.
        let asked = r#"{"grant_type":"refresh_token","refresh_token":"sk-ant-ort01-shownshownshown","client_id":"c"}"#;
        tls.write_all(
            format!(
                "POST /v1/oauth/token HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{asked}",
                asked.len()
            )
            .as_bytes(),
        )
        .unwrap();
        let answered = answer_on(&mut tls);
        let body: serde_json::Value =
            serde_json::from_str(answered.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(
            (&body["access_token"], &body["refresh_token"]),
            (
                &serde_json::json!(ACCESS_SHOWN),
                &serde_json::json!(REFRESH_SHOWN)
            ),
            "{answered}"
        );
        // A login's code exchange (it would replace the node's login) and the refresh token's
        // placeholder in a header are refused.
        let code = r#"{"grant_type":"authorization_code","code":"x"}"#;
        tls.write_all(
            format!(
                "POST /v1/oauth/token HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{code}",
                code.len()
            )
            .as_bytes(),
        )
        .unwrap();
        let refused = answer_on(&mut tls);
        assert!(
            refused.starts_with("HTTP/1.1 403")
                && refused.contains("which the authorization_code grant would replace"),
            "{refused}"
        );
        tls.write_all(
            format!("GET /v1/models HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {REFRESH_SHOWN}\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let refused = answer_on(&mut tls);
        assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
        assert_eq!(runs(), 1);
    }

    #[test]
    fn a_refresh_that_fails_is_not_tried_again_at_once_and_the_box_learns_no_reason() {
        let (port, roots) = tls_upstream();
        // Fails, saying what the box must not see.
        let (proxy, ca_pem, dir) = oauth_proxy(port, roots, |_| {
            r#"echo run >> "$2"; echo 'secret detail s3://bucket' >&2; exit 1"#.to_string()
        });
        let get = format!(
            "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {ACCESS_SHOWN}\r\n\r\n"
        );
        for _ in 0..3 {
            let mut tls = tls_to(&proxy, port, &ca_pem);
            tls.write_all(get.as_bytes()).unwrap();
            let refused = answer_on(&mut tls);
            assert!(
                refused.starts_with("HTTP/1.1 403")
                    && refused.contains("the node's claude login could not be refreshed")
                    && !refused.contains("secret detail"),
                "{refused}"
            );
        }
        let runs = std::fs::read_to_string(dir.path().join("refreshes")).unwrap();
        assert_eq!(runs.lines().count(), 1, "{runs}");
    }

    /// Through `proxy`: CONNECT localhost:port, TLS trusting `ca_pem`, then `requests` in turn
    /// on that connection; what came back (everything after the CONNECT's answer).
    fn through_tls(proxy: &Proxy, port: u16, ca_pem: &str, request: &str) -> String {
        let mut tls = tls_to(proxy, port, ca_pem);
        tls.write_all(request.as_bytes()).unwrap();
        let mut got = Vec::new();
        let _ = tls.read_to_end(&mut got);
        String::from_utf8_lossy(&got).into_owned()
    }

    type Tls = rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>;

    /// A TLS connection through `proxy`'s CONNECT to localhost:port, trusting `ca_pem`.
    fn tls_to(proxy: &Proxy, port: u16, ca_pem: &str) -> Tls {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
            .unwrap();
        let config = Arc::new(
            rustls::ClientConfig::builder()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        );
        let mut s = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(
            format!("CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
        let head = read_head(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(config, name).unwrap();
        rustls::StreamOwned::new(conn, s)
    }

    fn read_head(s: &mut impl Read) -> String {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap() == 1 {
            head.push(byte[0]);
        }
        String::from_utf8_lossy(&head).into_owned()
    }

    /// One answer on a kept connection: its head and its body (by its length).
    fn answer_on(tls: &mut Tls) -> String {
        let head = read_head(tls);
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(|n| n.trim().parse().unwrap())
            })
            .unwrap();
        let mut body = vec![0u8; length];
        tls.read_exact(&mut body).unwrap();
        head + &String::from_utf8_lossy(&body)
    }

    #[test]
    fn each_brokered_request_is_decided_by_the_policy_in_force() {
        let (port, roots) = tls_upstream();
        let (proxy, ca_pem, _ca) = brokered_proxy(port, roots);
        let mut tls = tls_to(&proxy, port, &ca_pem);
        let get =
            format!("GET / HTTP/1.1\r\nHost: localhost\r\nAuthorization: token {SHOWN}\r\n\r\n");
        tls.write_all(get.as_bytes()).unwrap();
        let first = answer_on(&mut tls);
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        // The box's policy loses the host while the connection stays open.
        proxy.allow(&[]);
        tls.write_all(get.as_bytes()).unwrap();
        let second = answer_on(&mut tls);
        assert!(second.starts_with("HTTP/1.1 403"), "{second}");
        // TRACE echoes a request: no token goes into one.
        proxy.allow(&[format!("localhost:{port}"), format!("127.0.0.1:{port}")]);
        tls.write_all(
            format!("TRACE / HTTP/1.1\r\nHost: localhost\r\nAuthorization: token {SHOWN}\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
        let trace = answer_on(&mut tls);
        assert!(
            trace.contains("the broker puts no token into a TRACE request"),
            "{trace}"
        );
    }

    #[test]
    fn a_ruled_host_gets_the_real_token_where_the_box_sent_its_placeholder() {
        let (port, roots) = tls_upstream();
        let (proxy, ca_pem, _ca) = brokered_proxy(port, roots);
        let got = through_tls(
            &proxy,
            port,
            &ca_pem,
            &format!(
                "GET /user HTTP/1.1\r\nHost: localhost\r\nAuthorization: token {SHOWN}\r\nConnection: close\r\n\r\n"
            ),
        );
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        assert!(
            got.contains(&format!("authorization: token {REAL}")),
            "{got}"
        );
        assert!(!got.contains(SHOWN), "{got}");
        // One line per request served through the broker (the CONNECT is logged only when
        // it fails).
        let log = proxy.log(1);
        let brokered = log.iter().find(|r| r.method == "GET").unwrap();
        assert_eq!(
            (
                brokered.allowed,
                brokered.rule.as_deref(),
                brokered.path.as_deref()
            ),
            (
                true,
                Some(format!("localhost:{port} (token put in by the broker)").as_str()),
                Some("/user")
            )
        );
    }

    #[test]
    fn a_placeholder_where_its_token_does_not_go_is_refused() {
        let (port, roots) = tls_upstream();
        let (proxy, ca_pem, _ca) = brokered_proxy(port, roots);
        // Another login's placeholder on this ruled host; this login's where a server would
        // keep it (a path it writes to), not as the credential.
        let refused = |request: &str| {
            let got = through_tls(&proxy, port, &ca_pem, request);
            assert!(got.starts_with("HTTP/1.1 403"), "{got}");
            got
        };
        let got = refused(
            "GET / HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sk-codexplaceholder\r\nConnection: close\r\n\r\n",
        );
        assert!(
            got.contains("a placeholder of the codex login went to localhost; this box may not use that login"),
            "{got}"
        );
        let got = refused(&format!(
            "PUT /repos/a/b/contents/{SHOWN} HTTP/1.1\r\nHost: localhost\r\nAuthorization: token {SHOWN}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ));
        assert!(got.contains("in the request's URL"), "{got}");
        let got = refused(&format!(
            "GET / HTTP/1.1\r\nHost: localhost\r\nX-Note: {SHOWN}\r\nConnection: close\r\n\r\n"
        ));
        assert!(got.contains("in its x-note header"), "{got}");
        // Plain HTTP to a listed host: no token goes there.
        let (plain, received) = upstream();
        let (proxy, _, _ca) = brokered_proxy(port, rustls::RootCertStore::empty());
        proxy.allow(&[format!("127.0.0.1:{plain}")]);
        let answer = proxy.exchange(
            &format!("GET http://127.0.0.1:{plain}/?t={SHOWN} HTTP/1.1\r\nHost: 127.0.0.1:{plain}\r\nConnection: close\r\n\r\n"),
            None,
        );
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(
            answer.contains("a placeholder of the gh login went to 127.0.0.1"),
            "{answer}"
        );
        assert!(
            received.try_recv().is_err(),
            "the request reached the server"
        );
    }

    #[test]
    fn a_host_without_a_rule_is_tunnelled_not_terminated() {
        let (port, received) = upstream();
        let (tls_port, roots) = tls_upstream();
        let (proxy, _, _ca) = brokered_proxy(tls_port, roots);
        proxy.allow(&[format!("127.0.0.1:{port}")]);
        let answer = proxy.exchange(
            &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"),
            Some(format!("RAW {SHOWN}").as_bytes()),
        );
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("RAW-ECHO"), "{answer}");
        // The tunnel's bytes pass as they are: the proxy does not look into them.
        assert_eq!(received.recv().unwrap(), format!("RAW {SHOWN}"));
    }
}
