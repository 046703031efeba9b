//! S3 backend (Cloudflare R2 in production): `boxes/<name>/meta.json` written only by
//! compare-and-swap (`If-None-Match: *` to create, `If-Match: <etag>` to update).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::primitives::ByteStream;
use futures_util::StreamExt;
use tokio::runtime::Runtime;

use super::events::Event;
use super::meta::{self, BadRecord, Meta};
use super::{
    Accounts, Cas, DeltaStore, EventLog, Records, RepositoryKeys, SEALED_DIR, SealedObject, Stored,
    Version,
};
use crate::atomic;
use crate::config::S3Config;
use crate::error::UserError;
use crate::plan::delta::PublishedRef;
use crate::plan::restic::Repository;

/// Record reads a listing keeps in flight.
const READS_IN_FLIGHT: usize = 32;

pub(crate) struct S3Store {
    rt: Runtime,
    client: Client,
    bucket: String,
    endpoint: String,
    /// Records as last read, by `ETag`: a listing reads only those that changed.
    cache: RecordCache,
}

fn key(name: &str) -> String {
    format!("boxes/{name}/meta.json")
}

/// Outside `boxes/`, so that events never lengthen the listing of records.
fn events_prefix(name: &str) -> String {
    format!("events/{name}/")
}

/// HTTP status of a failed call, when the server answered at all.
fn status<E, R>(e: &SdkError<E, R>) -> Option<u16>
where
    R: HasStatus,
{
    e.raw_response().map(HasStatus::status)
}

trait HasStatus {
    fn status(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }
}

impl S3Store {
    pub(crate) fn new(cfg: &S3Config, cache_dir: &Path) -> Result<S3Store> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(&cfg.endpoint)
            .region(Region::new(cfg.region.clone()))
            .credentials_provider(Credentials::new(
                cfg.access_key_id.expose(),
                cfg.secret_access_key.expose(),
                None,
                None,
                "ag-box-env",
            ))
            .force_path_style(true)
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .retry_config(RetryConfig::standard().with_max_attempts(3))
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .operation_attempt_timeout(Duration::from_secs(20))
                    .operation_timeout(Duration::from_mins(1))
                    .build(),
            )
            .build();
        Ok(S3Store {
            rt,
            client: Client::from_conf(conf),
            bucket: cfg.bucket.clone(),
            endpoint: cfg.endpoint.clone(),
            cache: RecordCache::new(cache_dir),
        })
    }

    fn unreachable(&self, what: &str, e: impl std::fmt::Display) -> anyhow::Error {
        UserError::failed(
            format!("S3 {what} at {}/{} failed: {e}", self.endpoint, self.bucket),
            "check BOX_S3_ENDPOINT, BOX_BUCKET, the keys and the network, then run the command again",
        )
        .into()
    }
}

impl S3Store {
    /// One record, read without blocking (so that a listing reads many at once).
    async fn fetch(&self, name: &str) -> Result<Option<Stored>> {
        let resp = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key(name))
            .send()
            .await
        {
            Ok(r) => r,
            Err(e)
                if e.as_service_error().is_some_and(
                    aws_sdk_s3::operation::get_object::GetObjectError::is_no_such_key,
                ) =>
            {
                return Ok(None);
            }
            Err(e) => {
                return Err(self.unreachable("read", aws_sdk_s3::error::DisplayErrorContext(e)));
            }
        };
        let etag = resp
            .e_tag()
            .map(str::to_string)
            .context("S3 answered without an ETag")?;
        let bytes = resp
            .body
            .collect()
            .await
            .context("reading a box record")?
            .into_bytes();
        let meta = meta::parse(name, &bytes, |m: &Meta| m)?;
        Ok(Some(Stored {
            meta,
            version: Version(etag),
        }))
    }
}

impl S3Store {
    /// Every object under `prefix`.
    fn objects(&self, prefix: &str) -> Result<Vec<aws_sdk_s3::types::Object>> {
        let mut objects = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let resp = self
                .rt
                .block_on(
                    self.client
                        .list_objects_v2()
                        .bucket(&self.bucket)
                        .prefix(prefix)
                        .set_continuation_token(token.clone())
                        .send(),
                )
                .map_err(|e| self.unreachable("list", aws_sdk_s3::error::DisplayErrorContext(e)))?;
            objects.extend(resp.contents().iter().cloned());
            token = resp.next_continuation_token().map(str::to_string);
            if token.is_none() {
                return Ok(objects);
            }
        }
    }

    /// The keys of every object under `prefix`.
    fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .objects(prefix)?
            .iter()
            .filter_map(|o| o.key().map(str::to_string))
            .collect())
    }

    async fn fetch_event(&self, key: String) -> Result<(String, Event)> {
        let bytes = self
            .get_bytes(&key)
            .await?
            .with_context(|| format!("{key} is gone"))?;
        let event = serde_json::from_slice(&bytes).with_context(|| format!("parsing {key}"))?;
        Ok((key, event))
    }

    /// An object's bytes, unconditionally (None: there is none).
    async fn get_bytes(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.get_with_etag(key).await?.map(|(bytes, _)| bytes))
    }

    /// An object's bytes and its `ETag` (None: there is none).
    async fn get_with_etag(&self, key: &str) -> Result<Option<(Vec<u8>, Option<String>)>> {
        self.get_at_most(key, None).await
    }

    /// An object's bytes and its `ETag`, refused unread when it is larger than `max` bytes.
    async fn get_at_most(
        &self,
        key: &str,
        max: Option<u64>,
    ) -> Result<Option<(Vec<u8>, Option<String>)>> {
        let resp = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(r) => r,
            Err(e)
                if e.as_service_error().is_some_and(
                    aws_sdk_s3::operation::get_object::GetObjectError::is_no_such_key,
                ) =>
            {
                return Ok(None);
            }
            Err(e) => {
                return Err(self.unreachable("read", aws_sdk_s3::error::DisplayErrorContext(e)));
            }
        };
        if let Some(max) = max {
            let size = resp.content_length().and_then(|n| u64::try_from(n).ok());
            anyhow::ensure!(
                size.is_some_and(|n| n <= max),
                "{key} is {} bytes, more than the {max} it may be",
                size.map_or_else(|| "an unknown number of".to_string(), |n| n.to_string())
            );
        }
        let etag = resp.e_tag().map(str::to_string);
        let bytes = resp
            .body
            .collect()
            .await
            .with_context(|| format!("reading {key}"))?;
        Ok(Some((bytes.into_bytes().to_vec(), etag)))
    }

    /// Write a JSON object by compare-and-swap: only while it is at `expected` (None: only
    /// while there is none).
    fn put_if(&self, key: &str, body: Vec<u8>, expected: Option<&Version>) -> Result<Cas> {
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/json")
            .body(ByteStream::from(body));
        req = match expected {
            None => req.if_none_match("*"),
            Some(v) => req.if_match(&v.0),
        };
        match self.rt.block_on(req.send()) {
            Ok(out) => Ok(Cas::Written(out.e_tag().map(|e| Version(e.to_string())))),
            // 412: another writer won; 404 on If-Match: the object went away meanwhile.
            Err(e) if matches!(status(&e), Some(412 | 409)) => Ok(Cas::Conflict),
            Err(e) if expected.is_some() && status(&e) == Some(404) => Ok(Cas::Conflict),
            Err(e) => Err(self.unreachable("write", aws_sdk_s3::error::DisplayErrorContext(e))),
        }
    }

    /// Write an object unconditionally (events, keys, deltas never conflict).
    fn put_bytes(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        self.rt
            .block_on(
                self.client
                    .put_object()
                    .bucket(&self.bucket)
                    .key(key)
                    .body(ByteStream::from(bytes))
                    .send(),
            )
            .map_err(|e| self.unreachable("write", aws_sdk_s3::error::DisplayErrorContext(e)))?;
        Ok(())
    }

    fn delete_key(&self, key: &str) -> Result<()> {
        self.rt
            .block_on(
                self.client
                    .delete_object()
                    .bucket(&self.bucket)
                    .key(key)
                    .send(),
            )
            .map_err(|e| self.unreachable("delete", aws_sdk_s3::error::DisplayErrorContext(e)))?;
        Ok(())
    }
}

fn account_key(row: &str) -> String {
    format!("accounts/{row}.json")
}

impl Accounts for S3Store {
    fn keeps_accounts(&self) -> bool {
        true
    }

    fn account(&self, row: &str) -> Result<Option<(Vec<u8>, Version)>> {
        let key = account_key(row);
        let got = self.rt.block_on(self.get_with_etag(&key))?;
        got.map(|(bytes, etag)| {
            let etag = etag.with_context(|| format!("{key} has no version (ETag)"))?;
            Ok((bytes, Version(etag)))
        })
        .transpose()
    }

    fn put_account(&self, row: &str, bytes: &[u8], expected: Option<&Version>) -> Result<Cas> {
        self.put_if(&account_key(row), bytes.to_vec(), expected)
    }
}

impl Records for S3Store {
    fn describe(&self) -> String {
        format!("s3 {}/{}", self.endpoint, self.bucket)
    }

    /// Some S3-compatible servers ignore conditional headers and overwrite.
    fn conditional_writes(&self, probe_key: &str) -> Result<bool> {
        let put = || {
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(probe_key)
                .if_none_match("*")
                .body(ByteStream::from_static(b"probe"))
                .send()
        };
        self.rt.block_on(async {
            put().await.map_err(|e| {
                self.unreachable("probe write", aws_sdk_s3::error::DisplayErrorContext(e))
            })?;
            let second = put().await;
            let _ = self
                .client
                .delete_object()
                .bucket(&self.bucket)
                .key(probe_key)
                .send()
                .await;
            match second {
                Ok(_) => Ok(false),
                Err(e) if status(&e) == Some(412) => Ok(true),
                Err(e) => {
                    Err(self.unreachable("probe write", aws_sdk_s3::error::DisplayErrorContext(e)))
                }
            }
        })
    }

    fn server_time(&self, probe_key: &str) -> Result<Option<std::time::SystemTime>> {
        self.rt.block_on(async {
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(probe_key)
                .body(ByteStream::from_static(b"clock"))
                .send()
                .await
                .map_err(|e| {
                    self.unreachable("probe write", aws_sdk_s3::error::DisplayErrorContext(e))
                })?;
            let head = self
                .client
                .head_object()
                .bucket(&self.bucket)
                .key(probe_key)
                .send()
                .await;
            let _ = self
                .client
                .delete_object()
                .bucket(&self.bucket)
                .key(probe_key)
                .send()
                .await;
            let head = head.map_err(|e| {
                self.unreachable("probe read", aws_sdk_s3::error::DisplayErrorContext(e))
            })?;
            Ok(head
                .last_modified()
                .and_then(|t| std::time::SystemTime::try_from(*t).ok()))
        })
    }

    fn check_reachable(&self) -> Result<()> {
        self.rt
            .block_on(self.client.head_bucket().bucket(&self.bucket).send())
            .map(|_| ())
            .map_err(|e| match status(&e) {
                Some(404) => UserError::failed(
                    format!(
                        "bucket '{}' does not exist at {}",
                        self.bucket, self.endpoint
                    ),
                    "create it (R2: dashboard -> R2 -> Create bucket) or fix BOX_BUCKET",
                )
                .into(),
                Some(403) => UserError::failed(
                    format!(
                        "access to bucket '{}' at {} was denied",
                        self.bucket, self.endpoint
                    ),
                    "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY and the token's bucket scope",
                )
                .into(),
                _ => self.unreachable("bucket check", aws_sdk_s3::error::DisplayErrorContext(e)),
            })
    }

    fn get(&self, name: &str) -> Result<Option<Stored>> {
        self.rt.block_on(self.fetch(name))
    }

    fn put(&self, meta: &Meta, expected: Option<&Version>) -> Result<Cas> {
        self.put_if(&key(&meta.name), serde_json::to_vec_pretty(meta)?, expected)
    }

    fn delete(&self, name: &str, expected: &Version) -> Result<Cas> {
        let req = self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(key(name))
            .if_match(&expected.0);
        match self.rt.block_on(req.send()) {
            Ok(_) => Ok(Cas::Written(None)),
            Err(e) if matches!(status(&e), Some(412 | 404)) => Ok(Cas::Conflict),
            Err(e) => Err(self.unreachable("delete", aws_sdk_s3::error::DisplayErrorContext(e))),
        }
    }

    fn list(&self) -> Result<Vec<Meta>> {
        // (name, ETag) of every record
        let listed: Vec<(String, Option<String>)> = self
            .objects("boxes/")?
            .into_iter()
            .filter_map(|o| {
                let name = o
                    .key()?
                    .strip_prefix("boxes/")?
                    .strip_suffix("/meta.json")?;
                Some((name.to_string(), o.e_tag().map(str::to_string)))
            })
            .collect();
        self.cache.keep_only(listed.iter().map(|(n, _)| n.as_str()));
        let mut out = Vec::new();
        let mut changed = Vec::new();
        for (name, etag) in &listed {
            match etag.as_deref().and_then(|e| self.cache.get(name, e)) {
                Some(meta) => out.push(meta),
                None => changed.push(name.as_str()),
            }
        }
        // Many records in flight at once: a store 50 ms away answers 200 in about a second.
        let read: Vec<Result<Option<Stored>>> = self.rt.block_on(
            futures_util::stream::iter(changed.iter().map(|n| self.fetch(n)))
                .buffer_unordered(READS_IN_FLIGHT)
                .collect(),
        );
        for r in read {
            match r {
                Ok(Some(s)) => {
                    self.cache.put(&s);
                    out.push(s.meta);
                }
                Ok(None) => {}
                Err(e) if e.is::<BadRecord>() => tracing::warn!("skipping {e}"),
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

impl EventLog for S3Store {
    fn put_event(&self, name: &str, event: &Event) -> Result<()> {
        let key = format!("{}{}.json", events_prefix(name), event.key());
        self.put_bytes(&key, serde_json::to_vec(event)?)
    }

    fn events(&self, name: &str) -> Result<Vec<(String, Event)>> {
        let prefix = events_prefix(name);
        let keys: Vec<String> = self.keys(&prefix)?;
        let read: Vec<Result<(String, Event)>> = self.rt.block_on(
            futures_util::stream::iter(keys.into_iter().map(|k| self.fetch_event(k)))
                .buffer_unordered(READS_IN_FLIGHT)
                .collect(),
        );
        let mut out = Vec::new();
        for r in read {
            match r {
                Ok((key, event)) => {
                    let key = key.strip_prefix(&prefix).unwrap_or(&key);
                    out.push((key.trim_end_matches(".json").to_string(), event));
                }
                Err(e) if e.is::<UserError>() => return Err(e),
                Err(e) => tracing::warn!("skipping an unreadable event: {e:#}"),
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    fn delete_events(&self, name: &str, keys: &[String]) -> Result<()> {
        let prefix = events_prefix(name);
        let deletes = keys.iter().map(|k| {
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(format!("{prefix}{k}.json"))
                .send()
        });
        let done: Vec<_> = self.rt.block_on(
            futures_util::stream::iter(deletes)
                .buffer_unordered(READS_IN_FLIGHT)
                .collect(),
        );
        for d in done {
            d.map_err(|e| self.unreachable("delete", aws_sdk_s3::error::DisplayErrorContext(e)))?;
        }
        Ok(())
    }
}

impl DeltaStore for S3Store {
    fn put_delta(&self, name: &str, published: Option<&PublishedRef>) -> Result<()> {
        let (current, earlier) = super::delta_names(name);
        let key = format!("deltas/{current}");
        match published {
            Some(p) => self.put_bytes(&key, serde_json::to_vec(p)?)?,
            None => self.delete_key(&key)?,
        }
        earlier
            .iter()
            .try_for_each(|e| self.delete_key(&format!("deltas/{e}")))
    }

    fn delta(&self, name: &str) -> Result<Option<PublishedRef>> {
        let key = format!("deltas/{}", super::delta_names(name).0);
        self.rt
            .block_on(self.get_bytes(&key))?
            .map(|b| serde_json::from_slice(&b).with_context(|| format!("parsing {key}")))
            .transpose()
    }

    fn put_sealed(&self, name: &str, file: &str, bytes: Vec<u8>) -> Result<()> {
        self.put_bytes(&sealed_key(name, file), bytes)
    }

    fn sealed(&self, name: &str, file: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let got = self
            .rt
            .block_on(self.get_at_most(&sealed_key(name, file), Some(max)))?;
        Ok(got.map(|(bytes, _)| bytes))
    }

    fn sealed_listing(&self) -> Result<Vec<SealedObject>> {
        let dir = format!("{SEALED_DIR}/");
        Ok(self
            .objects(&dir)?
            .iter()
            .filter_map(|o| {
                let (name, file) = o.key()?.strip_prefix(&dir)?.split_once('/')?;
                let at = o.last_modified()?;
                let at = std::time::UNIX_EPOCH
                    + Duration::new(u64::try_from(at.secs()).ok()?, at.subsec_nanos());
                Some(SealedObject {
                    name: name.to_string(),
                    file: file.to_string(),
                    written: humantime::format_rfc3339_nanos(at).to_string(),
                })
            })
            .collect())
    }

    fn delete_sealed(&self, name: &str, file: &str) -> Result<()> {
        self.delete_key(&sealed_key(name, file))
    }
}

impl RepositoryKeys for S3Store {
    fn put_repository_key(&self, repository: Repository, id: &str, bytes: &[u8]) -> Result<()> {
        self.put_bytes(&format!("{}{id}", keys_dir(repository)), bytes.to_vec())
    }

    fn repository_keys(&self, repository: Repository) -> Result<Vec<(String, Vec<u8>)>> {
        let dir = keys_dir(repository);
        let keys: Vec<String> = self.keys(&dir)?;
        let read: Vec<Result<(String, Vec<u8>)>> = self.rt.block_on(
            futures_util::stream::iter(keys.into_iter().map(|key| {
                let dir = &dir;
                async move {
                    let bytes = self
                        .get_bytes(&key)
                        .await?
                        .with_context(|| format!("{key} is gone"))?;
                    let id = key.trim_start_matches(dir.as_str()).to_string();
                    Ok((id, bytes))
                }
            }))
            .buffer_unordered(READS_IN_FLIGHT)
            .collect(),
        );
        read.into_iter().collect()
    }

    fn repository_key(&self, repository: Repository, id: &str) -> Result<Option<Vec<u8>>> {
        let key = format!("{}{id}", keys_dir(repository));
        let got = self
            .rt
            .block_on(self.get_at_most(&key, Some(super::KEY_FILE_MAX)))?;
        Ok(got.map(|(bytes, _)| bytes))
    }

    fn delete_repository_key(&self, repository: Repository, id: &str) -> Result<()> {
        self.delete_key(&format!("{}{id}", keys_dir(repository)))
    }
}

/// Box `name`'s sealed changes object `file` (`plan::sealed`).
fn sealed_key(name: &str, file: &str) -> String {
    format!("{SEALED_DIR}/{name}/{file}")
}

/// Where a restic repository in the bucket keeps its key files.
fn keys_dir(repository: Repository) -> String {
    format!("{}/keys/", repository.dir())
}

/// Records as this node last read them, each with its `ETag` (the version S3 gives the content):
/// a listing whose `ETag` matches uses the copy here instead of reading the record again. Only
/// listings use it; every read before a write goes to the store.
struct RecordCache {
    dir: PathBuf,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct CachedRecord {
    etag: String,
    meta: Meta,
}

impl RecordCache {
    fn new(dir: &Path) -> RecordCache {
        RecordCache {
            dir: dir.to_path_buf(),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    fn get(&self, name: &str, etag: &str) -> Option<Meta> {
        let bytes = std::fs::read(self.file(name)).ok()?;
        let cached: CachedRecord = serde_json::from_slice(&bytes).ok()?;
        (cached.etag == etag && cached.meta.problem(name).is_none()).then_some(cached.meta)
    }

    /// Best effort: a cache that cannot be written only costs the next listing a read.
    fn put(&self, stored: &Stored) {
        let cached = CachedRecord {
            etag: stored.version.0.clone(),
            meta: stored.meta.clone(),
        };
        let written = std::fs::create_dir_all(&self.dir)
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(serde_json::to_vec(&cached)?))
            .and_then(|bytes| atomic::write(&self.file(&stored.meta.name), &bytes, 0o600));
        if let Err(e) = written {
            tracing::debug!("not caching record '{}': {e:#}", stored.meta.name);
        }
    }

    /// Forget the records the store no longer has.
    fn keep_only<'a>(&self, names: impl Iterator<Item = &'a str>) {
        let keep: std::collections::HashSet<String> = names.map(|n| format!("{n}.json")).collect();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            if !keep.contains(&e.file_name().to_string_lossy().into_owned()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Version;
    use pretty_assertions::assert_eq;

    fn stored(name: &str, etag: &str) -> Stored {
        Stored {
            meta: Meta::sample(name),
            version: Version(etag.into()),
        }
    }

    #[test]
    fn the_record_cache_answers_only_for_the_same_etag_and_forgets_unlisted_records() {
        let dir = tempfile::tempdir().unwrap();
        let cache = RecordCache::new(&dir.path().join("bucket"));
        assert_eq!(cache.get("a", "\"e1\""), None);
        cache.put(&stored("a", "\"e1\""));
        cache.put(&stored("b", "\"e2\""));
        assert_eq!(cache.get("a", "\"e1\""), Some(Meta::sample("a")));
        assert_eq!(
            cache.get("a", "\"e9\""),
            None,
            "a changed record is read again"
        );
        // A copy stored under another name is not taken for that name.
        std::fs::copy(cache.file("b"), cache.file("c")).unwrap();
        assert_eq!(cache.get("c", "\"e2\""), None);
        cache.keep_only(["b"].into_iter());
        assert_eq!(cache.get("a", "\"e1\""), None);
        assert_eq!(cache.get("b", "\"e2\""), Some(Meta::sample("b")));
    }
}
