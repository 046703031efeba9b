//! The proxy as the box's credential broker: for a host whose login the box is given
//! (`plan::broker`), a CONNECT is answered by the proxy itself, TLS ended with the certificate
//! the box's start issued from the node's CA, and each request sent on over TLS to the real
//! host with the login's placeholders replaced by its token, on that login's hosts only.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::oauth;
use super::{
    Attempt, Body, CONNECT_TIMEOUT, Counted, Counters, HEADER_TIMEOUT, LoggedBody, MAX_BUF, answer,
    dial, strip_hop_by_hop,
};
use crate::plan::broker::{self, BrokerFile};

/// What the box's start left for its proxy, ready to serve.
pub(super) struct Broker {
    file: BrokerFile,
    /// One per OAuth login of `file`, in its order.
    gates: Vec<oauth::Gate>,
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

impl Broker {
    /// The broker of the box's run dir; None when the box has no login to stand in for.
    pub(super) fn load(path: &Path) -> Result<Option<Broker>> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let file: BrokerFile = serde_json::from_slice(&bytes)
            .with_context(|| format!("parsing {}", path.display()))?;
        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for e in &native.errors {
            tracing::warn!("reading the system's CA certificates: {e}");
        }
        roots.add_parsable_certificates(native.certs);
        let mut broker = Broker::new(file, roots)?;
        // A sign-in through the broker outlives a restart of the proxy (its run dir).
        if let Some(dir) = path.parent() {
            broker.gates = broker
                .gates
                .into_iter()
                .map(|g| g.keeping_in(dir))
                .collect();
        }
        Ok(Some(broker))
    }

    /// `file`'s broker, trusting `roots` for the real hosts.
    pub(super) fn new(file: BrokerFile, roots: RootCertStore) -> Result<Broker> {
        let chain = CertificateDer::pem_slice_iter(file.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .context("the broker's certificate")?;
        let key = PrivateKeyDer::from_pem_slice(file.key_pem.as_bytes())
            .context("the broker's certificate key")?;
        let mut server = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .context("the broker's certificate")?;
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut client = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Broker {
            gates: file.oauth.iter().cloned().map(oauth::Gate::new).collect(),
            file,
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        })
    }

    /// A CONNECT to `host:port` is answered here (a ruled host, or an OAuth login's token
    /// endpoint's), not tunnelled.
    pub(super) fn terminates(&self, host: &str, port: u16) -> bool {
        port == self.file.port
            && (self
                .file
                .rules
                .iter()
                .any(|r| r.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)))
                || self
                    .file
                    .oauth
                    .iter()
                    .any(|a| a.token_host.eq_ignore_ascii_case(host)))
    }

    /// What connects to the real hosts (the system's CAs), on the port ruled hosts are served on.
    pub(super) fn upstream(&self) -> (&TlsConnector, u16) {
        (&self.connector, self.file.port)
    }

    /// The OAuth logins the broker stands in for as they are now (a login the box made through
    /// the broker changes its placeholders), each with its gate.
    pub(super) fn oauth(&self) -> impl Iterator<Item = (broker::OauthAccount, &oauth::Gate)> {
        self.gates.iter().map(|g| (g.account(), g))
    }

    /// Every placeholder the box may send: its logins' tokens', and its OAuth logins' (their
    /// tokens unknown here: looked up when a request carries one).
    fn placeholders(&self) -> Vec<broker::Secret> {
        let oauth = self.oauth().flat_map(|(a, _)| {
            [a.access, a.refresh].map(|p| broker::Secret {
                login: a.login.clone(),
                placeholder: p,
                real: String::new(),
                bearer_only: true,
                hosts: Vec::new(),
                key_header: None,
            })
        });
        self.file.secrets.iter().cloned().chain(oauth).collect()
    }

    /// Plain HTTP carries no token: the refusal of a request that holds a placeholder.
    pub(super) fn refuses_plain(
        &self,
        req: &Request<Incoming>,
        host: &str,
        port: u16,
    ) -> Option<String> {
        let target = req.uri().to_string();
        let known = self.placeholders();
        let login = std::iter::once(target.as_bytes())
            .chain(req.headers().values().map(HeaderValue::as_bytes))
            .find_map(|v| broker::placeholder_in(v, &known))?;
        Some(format!(
            "a placeholder of the {login} login went to {host}:{port} over plain HTTP; its token goes only over HTTPS to its own hosts"
        ))
    }
}

/// One terminated connection: where its requests go, and the upstream they share.
struct Terminated {
    attempt: Attempt,
    broker: Arc<Broker>,
    upstream: tokio::sync::Mutex<Option<(SendRequest<Incoming>, Counters)>>,
}

/// Answer a CONNECT to a ruled host: TLS ended here, each request served by [`brokered`].
pub(super) fn terminate(
    req: Request<Incoming>,
    attempt: Attempt,
    rule: String,
    broker: Arc<Broker>,
    slot: Arc<tokio::sync::OwnedSemaphorePermit>,
) -> Response<Body> {
    tokio::spawn(async move {
        let _slot = slot;
        let client = match hyper::upgrade::on(req).await {
            Ok(c) => c,
            Err(e) => {
                attempt.log(Ok(&rule), Some(format!("upgrade: {e}")), (0, 0));
                return;
            }
        };
        let accepted =
            tokio::time::timeout(HEADER_TIMEOUT, broker.acceptor.accept(TokioIo::new(client)))
                .await;
        let tls = match accepted {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                attempt.log(Ok(&rule), Some(format!("TLS from the box: {e}")), (0, 0));
                return;
            }
            Err(_) => {
                attempt.log(
                    Ok(&rule),
                    Some("TLS from the box: timed out".into()),
                    (0, 0),
                );
                return;
            }
        };
        let conn = Arc::new(Terminated {
            attempt,
            broker,
            upstream: tokio::sync::Mutex::new(None),
        });
        let service = hyper::service::service_fn(move |req| brokered(req, conn.clone()));
        let served = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .max_buf_size(MAX_BUF)
            .serve_connection(TokioIo::new(tls), service)
            .await;
        if let Err(e) = served {
            tracing::debug!("brokered connection: {e}");
        }
    });
    Response::new(super::text_body(String::new()))
}

/// A request the broker answers itself (an OAuth login's token endpoint, Google's token info);
/// Err: the request, to go on to the real host.
async fn answered_here(
    req: Request<Incoming>,
    conn: &Terminated,
    attempt: &Attempt,
) -> Result<Response<Body>, Request<Incoming>> {
    let host = attempt.host.as_str();
    if let Some((account, gate)) = conn
        .broker
        .oauth()
        .find(|(a, _)| oauth::is_token_info(a, host, req.uri().path()))
    {
        return Ok(oauth::token_info(req, &account, gate, attempt).await);
    }
    if let Some((account, gate)) = conn
        .broker
        .oauth()
        .find(|(a, _)| oauth::is_token_request(a, host, req.uri().path()))
        && req.method() == hyper::Method::POST
    {
        return Ok(
            oauth::token_request(req, &account, gate, conn.broker.upstream(), attempt).await,
        );
    }
    Err(req)
}

/// One request of a terminated connection: placeholders put back (or the request refused),
/// sent on to the real host, the answer streamed back and logged when it ends.
async fn brokered(
    req: Request<Incoming>,
    conn: Arc<Terminated>,
) -> Result<Response<Body>, Infallible> {
    let base = &conn.attempt;
    let attempt = Attempt {
        state: base.state.clone(),
        host: base.host.clone(),
        port: base.port,
        method: req.method().to_string(),
        path: Some(req.uri().path().to_string()),
    };
    let host = attempt.host.as_str();
    let mut req = match answered_here(req, &conn, &attempt).await {
        Ok(answer) => return Ok(answer),
        Err(req) => req,
    };
    let put_in = match with_tokens(&mut req, host, &conn.broker).await {
        Ok(logins) => logins,
        Err(reason) => return Ok(attempt.refuse(&reason)),
    };
    let target = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    if let Some(reason) = broker::refuses_target(&target, host, &conn.broker.placeholders()) {
        return Ok(attempt.refuse(&reason));
    }
    if let Some(reason) = broker::path_refusal(&put_in, host, req.uri().path()) {
        return Ok(attempt.refuse(&reason));
    }
    let put_in = !put_in.is_empty();
    // Origin form, whatever form the box used.
    *req.uri_mut() = target.parse().unwrap_or_default();
    strip_hop_by_hop(req.headers_mut());
    // A ruled host is a name, terminated on HTTPS's own port: named as a browser would.
    if let Ok(v) = HeaderValue::from_str(host) {
        req.headers_mut().insert(header::HOST, v);
    }
    if put_in && !broker::method_takes_token(req.method().as_str()) {
        return Ok(attempt.refuse(&format!(
            "the broker puts no token into a {} request",
            req.method()
        )));
    }
    // Decided for every request, as plain HTTP is: a policy change applies at once.
    let (rule, addrs) = match attempt.decide().await {
        Ok(d) => d,
        Err(reason) => return Ok(attempt.refuse(&reason)),
    };
    let rule = if put_in {
        format!("{rule} (token put in by the broker)")
    } else {
        format!("{rule} (through the broker)")
    };
    let mut upstream = conn.upstream.lock().await;
    let ready = match upstream.take() {
        Some((mut sender, bytes)) if !sender.is_closed() => {
            sender.ready().await.is_ok().then_some((sender, bytes))
        }
        _ => None,
    };
    let (mut sender, bytes) = match ready {
        Some(u) => u,
        None => match connect(&conn.broker, &addrs, host).await {
            Ok(u) => u,
            Err(e) => return Ok(attempt.unreachable(&rule, &e)),
        },
    };
    let before = bytes.get();
    let counted = bytes.clone();
    let since = move || {
        let now = counted.get();
        (now.0 - before.0, now.1 - before.1)
    };
    match sender.send_request(req).await {
        Ok(mut resp) => {
            *upstream = Some((sender, bytes));
            strip_hop_by_hop(resp.headers_mut());
            Ok(resp.map(|inner| {
                http_body_util::BodyExt::boxed(LoggedBody {
                    inner,
                    error: None,
                    on_end: Some(Box::new(move |error| {
                        attempt.log(Ok(&rule), error, since());
                    })),
                })
            }))
        }
        Err(e) => {
            attempt.log(Ok(&rule), Some(format!("exchange: {e}")), since());
            Ok(answer(StatusCode::BAD_GATEWAY, &format!("{e}")))
        }
    }
}

/// The request with each placeholder put back as its token where it may go (the OAuth logins'
/// current tokens looked up, made fresh when due): the logins whose tokens went in, or why the
/// request is refused.
async fn with_tokens(
    req: &mut Request<Incoming>,
    host: &str,
    broker: &Broker,
) -> Result<Vec<String>, String> {
    let mut secrets = broker.file.secrets.clone();
    secrets.extend(oauth::secrets(req.headers(), broker.oauth()).await?);
    put_tokens_in(req.headers_mut(), host, &broker.file.rules, &secrets)
}

/// The request's headers with each placeholder put back as its token where it may go
/// (`broker::header_for`); the logins whose tokens went in, or why the request is refused.
fn put_tokens_in(
    headers: &mut hyper::HeaderMap,
    host: &str,
    rules: &[broker::Rule],
    secrets: &[broker::Secret],
) -> Result<Vec<String>, String> {
    let mut put_in: Vec<String> = Vec::new();
    for (name, value) in headers.iter_mut() {
        let Some(real) = broker::header_for(name.as_str(), value.as_bytes(), host, rules, secrets)?
        else {
            continue;
        };
        let v = HeaderValue::from_bytes(&real).map_err(|_| "a token does not fit in a header")?;
        if let Some(login) = broker::placeholder_in(value.as_bytes(), secrets) {
            put_in.push(login.to_string());
        }
        *value = v;
    }
    Ok(put_in)
}

/// A TLS connection to the real host, its certificate checked against the system's CAs.
async fn connect(
    broker: &Broker,
    addrs: &[SocketAddr],
    host: &str,
) -> Result<(SendRequest<Incoming>, Counters), String> {
    let stream = Counted::new(dial(addrs).await.map_err(|e| format!("connecting: {e}"))?);
    let bytes = stream.counters();
    let name = ServerName::try_from(host.to_string()).map_err(|e| format!("server name: {e}"))?;
    let handshake = async {
        let tls = broker
            .connector
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS to {host}: {e}"))?;
        hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("handshake: {e}"))
    };
    let (sender, link) = tokio::time::timeout(CONNECT_TIMEOUT, handshake)
        .await
        .map_err(|_| format!("TLS to {host}: timed out"))??;
    tokio::spawn(async move {
        if let Err(e) = link.await {
            tracing::debug!("brokered upstream: {e}");
        }
    });
    Ok((sender, bytes))
}
