//! Sending a box's notice to `BOX_NOTIFY` (`plan::notify`): a webhook or ntfy over HTTP(S) with
//! the system's roots, or a local program. Each try is bounded in time; a failure is the
//! caller's to log, never to wait on.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::plan::notify::{Notice, Target};

/// How long one notification may take.
const TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn send(target: &Target, notice: &Notice) -> Result<()> {
    match target {
        Target::Webhook(url) => post(
            url,
            &[("content-type", "application/json")],
            serde_json::to_vec(notice)?,
        ),
        Target::Ntfy(url) => {
            let (title, body) = notice.text();
            post(
                url,
                &[("title", title.as_str()), ("tags", "robot")],
                body.into_bytes(),
            )
        }
        Target::Command(program) => run(program, &serde_json::to_vec(notice)?),
    }
}

fn post(url: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::aws_lc_rs::default_provider())
            .context("reading the system's certificate roots")?
            .https_or_http()
            .enable_http1()
            .build();
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
        let mut request = hyper::Request::post(url);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let request = request.body(Full::new(Bytes::from(body)))?;
        let response = tokio::time::timeout(TIMEOUT, client.request(request))
            .await
            .context("no answer in time")??;
        if !response.status().is_success() {
            bail!("answered {}", response.status());
        }
        Ok(())
    })
}

fn run(program: &std::path::Path, input: &[u8]) -> Result<()> {
    let mut child = Command::new(program)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("running {}", program.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A program that does not read its input has still been told.
        let _ = stdin.write_all(input);
    }
    let end = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("{} ended with {status}", program.display());
            }
            return Ok(());
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{} took longer than {}s",
                program.display(),
                TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
