//! This node's certificate authority for the credential broker (`$BOX_STATE_DIR/ca`, root's
//! alone): boxes trust it, and a box's proxy shows a certificate by it for the hosts it stands
//! in for. Name-constrained to the hosts of `plan::broker::RULES`, so it vouches for no other
//! host even to a client that trusts it; made anew when those hosts change.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    NameConstraints,
};
use time::{Duration, OffsetDateTime};

use crate::atomic;
use crate::plan::doctor::CaFound;

const CERT: &str = "ca.pem";
const KEY: &str = "ca-key.pem";
const HOSTS: &str = "hosts.json";

/// The node's CA as loaded: its certificate (PEM, for the boxes' bundles) and key.
pub(crate) struct NodeCa {
    pub cert_pem: String,
    key_pem: String,
}

/// A certificate's key made ahead ([`make_key_ahead`]), taken by the next [`NodeCa::issue`].
static KEY_AHEAD: Mutex<Option<JoinHandle<Result<KeyPair, rcgen::Error>>>> = Mutex::new(None);

/// Make the next certificate's key beside what the caller does meanwhile: the crypto library
/// readies itself on the first key a process makes (30 ms here), which `up` then pays beside
/// its restore, not on the way to the box's start.
pub(crate) fn make_key_ahead() {
    if let Ok(mut ahead) = KEY_AHEAD.lock()
        && ahead.is_none()
    {
        *ahead = Some(std::thread::spawn(KeyPair::generate));
    }
}

/// The key made ahead, else one made now.
fn certificate_key() -> Result<KeyPair> {
    let ahead = KEY_AHEAD.lock().ok().and_then(|mut a| a.take());
    match ahead.map(JoinHandle::join) {
        Some(Ok(Ok(key))) => Ok(key),
        _ => KeyPair::generate().context("making a certificate's key"),
    }
}

/// The CA's name, the same for every CA ag-box makes (a leaf's issuer is matched on it and on
/// the key).
fn ca_params(hosts: &[String]) -> CertificateParams {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "ag-box");
    dn.push(DnType::CommonName, "ag-box node CA (credential broker)");
    let mut p = CertificateParams::default();
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    // Names only: every IP address is excluded (a DNS subtree alone leaves them unconstrained).
    p.name_constraints = Some(NameConstraints {
        permitted_subtrees: hosts.iter().cloned().map(GeneralSubtree::DnsName).collect(),
        excluded_subtrees: vec![
            GeneralSubtree::IpAddress(CidrSubnet::V4([0; 4], [0; 4])),
            GeneralSubtree::IpAddress(CidrSubnet::V6([0; 16], [0; 16])),
        ],
    });
    p
}

/// The CA in `dir`, made first when there is none or it was made for other hosts than `hosts`.
pub(crate) fn ensure(dir: &Path, hosts: &[String]) -> Result<NodeCa> {
    if let Some(ca) = load(dir, hosts)? {
        return Ok(ca);
    }
    let parent = dir.parent().context("the CA dir has no parent")?;
    fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    // One start at a time makes it; the others read what it made.
    let lock_path = parent.join(".ca.lock");
    let lock = fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .with_context(|| format!("locking {}", lock_path.display()))?;
    if let Some(ca) = load(dir, hosts)? {
        return Ok(ca);
    }
    // Made aside and moved in whole: a start beside this one reads the old CA or the new one.
    let fresh = parent.join(format!(".ca-new-{}", std::process::id()));
    let _ = fs::remove_dir_all(&fresh);
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&fresh)
        .with_context(|| format!("creating {}", fresh.display()))?;
    let key = KeyPair::generate().context("making the node CA's key")?;
    let mut params = ca_params(hosts);
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::days(1);
    params.not_after = now + Duration::days(3650);
    let cert = params.self_signed(&key).context("making the node CA")?;
    atomic::write(&fresh.join(KEY), key.serialize_pem().as_bytes(), 0o600)?;
    atomic::write(&fresh.join(CERT), cert.pem().as_bytes(), 0o644)?;
    atomic::write(&fresh.join(HOSTS), &serde_json::to_vec(hosts)?, 0o644)?;
    if dir.exists() {
        let old = parent.join(format!(".ca-old-{}", std::process::id()));
        fs::rename(dir, &old).with_context(|| format!("moving {} aside", dir.display()))?;
        let _ = fs::remove_dir_all(&old);
    }
    match fs::rename(&fresh, dir) {
        Ok(()) => tracing::info!(
            "made this node's CA for the credential broker in {}",
            dir.display()
        ),
        // Another start made one meanwhile: that one stands.
        Err(_) if dir.is_dir() => {
            let _ = fs::remove_dir_all(&fresh);
        }
        Err(e) => return Err(e).with_context(|| format!("moving the new CA to {}", dir.display())),
    }
    load(dir, hosts)?.context("the node CA just made is unreadable")
}

/// How the CA in `dir` stands, for `doctor`.
pub(crate) fn found(dir: &Path, hosts: &[String]) -> CaFound {
    let made_for: Option<Vec<String>> = fs::read(dir.join(HOSTS))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let open = fs::metadata(dir.join(KEY)).map(|m| m.permissions().mode() & 0o777);
    match (made_for, open) {
        (_, Ok(mode)) if mode & 0o077 != 0 => CaFound::KeyOpen(mode),
        (Some(h), Ok(_)) if h == hosts => CaFound::Ready,
        (_, Ok(_)) => CaFound::OtherHosts,
        (_, Err(_)) => CaFound::Absent,
    }
}

/// `doctor`'s (and `creds`') verdict on the CA in `dir`, made for this version's rules.
pub(crate) fn check(dir: &Path) -> crate::plan::doctor::Check {
    crate::plan::doctor::broker_ca(
        &dir.display().to_string(),
        found(dir, &crate::plan::broker::ruled_hosts()),
        Path::new(crate::plan::sandbox::SYSTEM_CA_BUNDLE).exists(),
    )
}

/// The CA in `dir`, if there is one made for `hosts`.
fn load(dir: &Path, hosts: &[String]) -> Result<Option<NodeCa>> {
    let made_for: Option<Vec<String>> = fs::read(dir.join(HOSTS))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    if made_for.as_deref() != Some(hosts) {
        return Ok(None);
    }
    let key_file = dir.join(KEY);
    // Whoever owns the key, or may read it, can vouch for the ruled hosts to every box.
    if let Ok(m) = fs::symlink_metadata(&key_file) {
        let why = if !m.file_type().is_file() {
            Some("not a regular file".to_string())
        } else if m.uid() != 0 {
            Some(format!("owned by uid {}, not root", m.uid()))
        } else if m.permissions().mode() & 0o077 != 0 {
            Some("readable by others than root".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            anyhow::bail!(
                "{} is {why}: remove {} (ag-box makes a new CA)",
                key_file.display(),
                dir.display()
            );
        }
    }
    match (
        fs::read_to_string(dir.join(CERT)),
        fs::read_to_string(&key_file),
    ) {
        (Ok(cert_pem), Ok(key_pem)) => Ok(Some(NodeCa { cert_pem, key_pem })),
        _ => Ok(None),
    }
}

impl NodeCa {
    /// A certificate for `hosts` (their names as its subject alternative names) and its key,
    /// both PEM; valid for 397 days from a day ago.
    pub(crate) fn issue(&self, ca_hosts: &[String], hosts: &[String]) -> Result<(String, String)> {
        let ca_key = KeyPair::from_pem(&self.key_pem).context("reading the node CA's key")?;
        let issuer = Issuer::new(ca_params(ca_hosts), ca_key);
        let mut p = CertificateParams::new(hosts.to_vec()).context("naming the certificate")?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, hosts.first().map_or("", String::as_str));
        p.distinguished_name = dn;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.use_authority_key_identifier_extension = true;
        let now = OffsetDateTime::now_utc();
        p.not_before = now - Duration::days(1);
        p.not_after = now + Duration::days(397);
        let key = certificate_key()?;
        let cert = p
            .signed_by(&key, &issuer)
            .context("signing a certificate")?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// The key as bytes: a node secret the boxes' placeholders are drawn from.
    pub(crate) fn secret(&self) -> &[u8] {
        self.key_pem.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_made_once_per_set_of_hosts_with_its_key_roots_alone() {
        let dir = tempfile::tempdir().unwrap();
        let ca_dir = dir.path().join("ca");
        let hosts = vec!["github.com".to_string()];
        let first = ensure(&ca_dir, &hosts).unwrap();
        let again = ensure(&ca_dir, &hosts).unwrap();
        assert_eq!(first.cert_pem, again.cert_pem);
        let mode = fs::metadata(ca_dir.join(KEY)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let other = ensure(&ca_dir, &["example.com".to_string()]).unwrap();
        assert_ne!(other.cert_pem, first.cert_pem);
        fs::set_permissions(ca_dir.join(KEY), fs::Permissions::from_mode(0o644)).unwrap();
        let err = ensure(&ca_dir, &["example.com".to_string()]).err().unwrap();
        assert!(
            format!("{err:#}").contains("is readable by others than root: remove"),
            "{err:#}"
        );
        fs::set_permissions(ca_dir.join(KEY), fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(ca_dir.join(KEY), Some(1), None).unwrap();
        let err = ensure(&ca_dir, &["example.com".to_string()]).err().unwrap();
        assert!(
            format!("{err:#}").contains("is owned by uid 1, not root: remove"),
            "{err:#}"
        );
        fs::remove_file(ca_dir.join(KEY)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", ca_dir.join(KEY)).unwrap();
        let err = ensure(&ca_dir, &["example.com".to_string()]).err().unwrap();
        assert!(
            format!("{err:#}").contains("is not a regular file: remove"),
            "{err:#}"
        );
    }
}
