//! A restic key file (restic's design document, "Keys, Encryption and MAC"): the repository's
//! master key, encrypted with AES-256-CTR and authenticated with Poly1305-AES under keys that
//! scrypt derives from a password.
//!
//! restic calibrates scrypt to about half a second at `init` and pays it on every run, which
//! is most of what a restic command costs on a small delta. Each node gets a key of its own
//! whose password is 256 random bits: guessing it is hopeless at any scrypt cost, so the cost
//! is kept low. The operator's password keeps its own, calibrated key.
//!
//! This is the one file of restic's format ag-box writes: restic offers no way to choose a
//! key's scrypt cost (`restic key add` calibrates it), and half a second per restic run is
//! most of what a small delta costs. The same sealing serves what ag-box keeps outside
//! restic: a park's changes, under the repository's master key (`plan::sealed`), and the
//! broker's logins, under the operator's password (`Sealer`).

use super::text::hex;
use aes::cipher::{BlockCipherEncrypt, KeyInit, KeyIvInit, StreamCipher};
use anyhow::{Context, Result};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// scrypt's cost for a random password: N = 2^12, r = 8, p = 1 (a few milliseconds).
pub(crate) const LOG_N: u8 = 12;
pub(crate) const R: u32 = 8;
pub(crate) const P: u32 = 1;

/// What restic stores under `keys/<id>` (its field names).
#[derive(Serialize)]
#[allow(non_snake_case)]
struct KeyFile<'a> {
    created: &'a str,
    username: &'a str,
    hostname: &'a str,
    kdf: &'a str,
    N: u64,
    r: u32,
    p: u32,
    salt: String,
    data: String,
}

/// The randomness a key file needs, drawn by the caller.
pub(crate) struct Randomness {
    pub salt: [u8; 64],
    pub iv: [u8; 16],
}

/// The key file that opens the repository whose master key is `master` (the JSON `restic cat
/// masterkey` prints) with `password`; returns its id (the SHA-256 of its bytes, as restic
/// names files) and its bytes.
pub(crate) fn key_file(
    master: &[u8],
    password: &[u8],
    random: &Randomness,
    created: &str,
    hostname: &str,
) -> Result<(String, Vec<u8>)> {
    // Compact, as restic writes it; and a check that it is a master key at all.
    let master: serde_json::Value =
        serde_json::from_slice(master).context("parsing restic's master key")?;
    anyhow::ensure!(
        master["encrypt"].is_string() && master["mac"]["k"].is_string(),
        "restic's master key lacks its fields"
    );
    let plain = Zeroizing::new(serde_json::to_vec(&master)?);
    // The copy sealed is encrypted where it lies: no plain copy of the key is left.
    let data = seal(
        &*derive(password, &random.salt)?,
        &random.iv,
        plain.to_vec(),
    )?;
    let file = KeyFile {
        created,
        username: "ag-box",
        hostname,
        kdf: "scrypt",
        N: 1 << LOG_N,
        r: R,
        p: P,
        salt: STANDARD.encode(random.salt),
        data: STANDARD.encode(data),
    };
    let bytes = serde_json::to_vec(&file)?;
    Ok((hex(&Sha256::digest(&bytes)), bytes))
}

/// The 64 bytes of a restic key: the AES-256 key, then the MAC's AES-128 key `k` and its `r`.
/// Wiped from memory when dropped.
pub(crate) type Keys = Zeroizing<[u8; 64]>;

/// scrypt's cost for what is sealed under the operator's password (`RESTIC_PASSWORD`, chosen
/// by a person): N = 2^16 (64 MiB, a fifth of a second), of the order restic calibrates the
/// repository's own key file of that password to.
pub(crate) const SEAL_LOG_N: u8 = 16;

/// scrypt's 64 bytes: the AES-256 key, then the MAC's AES-128 key `k` and its `r`.
fn derive(password: &[u8], salt: &[u8]) -> Result<Keys> {
    derive_at(password, salt, LOG_N)
}

/// [`derive`] at the cost 2^`log_n`.
fn derive_at(password: &[u8], salt: &[u8], log_n: u8) -> Result<Keys> {
    derive_with(password, salt, log_n, R, P)
}

/// scrypt's 64 bytes at the cost 2^`log_n`, `r`, `p`.
fn derive_with(password: &[u8], salt: &[u8], log_n: u8, r: u32, p: u32) -> Result<Keys> {
    let params =
        scrypt::Params::new(log_n, r, p).map_err(|e| anyhow::anyhow!("scrypt parameters: {e}"))?;
    let mut out = Zeroizing::new([0u8; 64]);
    scrypt::scrypt(password, salt, &params, out.as_mut())
        .map_err(|e| anyhow::anyhow!("scrypt: {e}"))?;
    Ok(out)
}

/// IV ‖ AES-256-CTR(plain) ‖ Poly1305-AES(ciphertext), restic's layout; sealed where it lies.
fn seal(keys: &[u8; 64], iv: &[u8; 16], mut plain: Vec<u8>) -> Result<Vec<u8>> {
    ctr::Ctr128BE::<aes::Aes256>::new_from_slices(&keys[..32], iv)
        .map_err(|e| anyhow::anyhow!("AES-CTR: {e}"))?
        .apply_keystream(&mut plain);
    let tag = mac(&keys[32..48], &keys[48..64], iv, &plain)?;
    plain.splice(..0, iv.iter().copied());
    plain.extend_from_slice(&tag);
    Ok(plain)
}

/// What seals as restic seals its files (IV ‖ AES-256-CTR ‖ Poly1305-AES) under keys scrypt
/// derives (at 2^[`SEAL_LOG_N`]) from a password and `random.salt`: what the store keeps that
/// only the nodes may read (the broker's logins, under `RESTIC_PASSWORD`, which every node
/// holds). Made before what it seals is known, so sealing itself takes no time.
pub(crate) struct Sealer {
    keys: Keys,
    iv: [u8; 16],
}

impl Sealer {
    pub(crate) fn new(password: &[u8], random: &Randomness) -> Result<Sealer> {
        Ok(Sealer {
            keys: derive_at(password, &random.salt, SEAL_LOG_N)?,
            iv: random.iv,
        })
    }

    pub(crate) fn seal(&self, plain: Vec<u8>) -> Result<Vec<u8>> {
        seal(&self.keys, &self.iv, plain)
    }
}

/// What a [`Sealer`] sealed with `password`, `salt` and scrypt's cost 2^`log_n`; Err when it was
/// not (a wrong password, bytes changed).
pub(crate) fn open_with(password: &[u8], salt: &[u8], log_n: u8, sealed: &[u8]) -> Result<Vec<u8>> {
    anyhow::ensure!(sealed.len() >= 32, "sealed bytes too short");
    anyhow::ensure!(
        (10..=20).contains(&log_n),
        "scrypt cost 2^{log_n} is none ag-box seals with"
    );
    open(&*derive_at(password, salt, log_n)?, sealed.to_vec())
        .map_err(|_| anyhow::anyhow!("the sealed bytes do not open with this password"))
}

/// What [`seal`] made under `keys`, its MAC checked first; opened where it lies.
fn open(keys: &[u8; 64], mut sealed: Vec<u8>) -> Result<Vec<u8>> {
    anyhow::ensure!(sealed.len() >= 32, "sealed bytes too short");
    let end = sealed.len() - 16;
    let iv: [u8; 16] = sealed[..16].try_into().context("the IV")?;
    let expected = mac(&keys[32..48], &keys[48..64], &iv, &sealed[16..end])?;
    // Compared in constant time: a forger learns nothing from how long the check took.
    let same: bool = subtle::ConstantTimeEq::ct_eq(&expected[..], &sealed[end..]).into();
    anyhow::ensure!(
        same,
        "its MAC does not match (altered, or sealed under another key)"
    );
    sealed.truncate(end);
    sealed.drain(..16);
    ctr::Ctr128BE::<aes::Aes256>::new_from_slices(&keys[..32], &iv)
        .map_err(|e| anyhow::anyhow!("AES-CTR: {e}"))?
        .apply_keystream(&mut sealed);
    Ok(sealed)
}

/// `plain` sealed under a repository's master key (`master_keys`), as restic seals its own
/// files, with a random `iv`.
pub(crate) fn seal_under(keys: &Keys, iv: &[u8; 16], plain: Vec<u8>) -> Result<Vec<u8>> {
    seal(keys, iv, plain)
}

/// What [`seal_under`] sealed under `keys`; Err when it was altered or sealed under another
/// key.
pub(crate) fn open_under(keys: &Keys, sealed: Vec<u8>) -> Result<Vec<u8>> {
    open(keys, sealed)
}

/// A repository's master key (the JSON `restic cat masterkey` prints) as the 64 bytes
/// [`seal_under`] takes: the AES-256 key, then the MAC's `k` and `r`.
pub(crate) fn master_keys(master: &[u8]) -> Result<Keys> {
    // Borrowed from `master` (base64 needs no escapes): no copy of the key outlives it.
    #[derive(Deserialize)]
    struct Mac<'a> {
        k: &'a str,
        r: &'a str,
    }
    #[derive(Deserialize)]
    struct Master<'a> {
        #[serde(borrow)]
        mac: Mac<'a>,
        encrypt: &'a str,
    }
    let m: Master = serde_json::from_slice(master).context("parsing restic's master key")?;
    let mut out = Zeroizing::new([0u8; 64]);
    for (range, field) in [(0..32, m.encrypt), (32..48, m.mac.k), (48..64, m.mac.r)] {
        let bytes = Zeroizing::new(
            STANDARD
                .decode(field)
                .context("decoding restic's master key")?,
        );
        anyhow::ensure!(
            bytes.len() == range.len(),
            "restic's master key has a part of the wrong length"
        );
        out[range].copy_from_slice(&bytes);
    }
    Ok(out)
}

/// Keys of ag-box's own under a repository's master key: HKDF-SHA-256 of it, for `label`.
/// What ag-box seals with them never opens as restic's, nor anything restic sealed as ag-box's.
pub(crate) fn subkeys(master: &Keys, label: &str) -> Result<Keys> {
    let mut out = Zeroizing::new([0u8; 64]);
    hkdf::Hkdf::<Sha256>::new(None, master.as_ref())
        .expand(label.as_bytes(), out.as_mut())
        .map_err(|e| anyhow::anyhow!("HKDF: {e}"))?;
    Ok(out)
}

/// The master key (its JSON) a key file of restic's holds, opened with `password`. Only a
/// cheap scrypt is paid (a node's own key, [`LOG_N`]): a costlier one is refused.
pub(crate) fn open_key_file(file: &[u8], password: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
    #[derive(Deserialize)]
    #[allow(non_snake_case)]
    struct Sealed {
        kdf: String,
        N: u64,
        r: u32,
        p: u32,
        salt: String,
        data: String,
    }
    let f: Sealed = serde_json::from_slice(file).context("parsing a restic key file")?;
    anyhow::ensure!(f.kdf == "scrypt", "a restic key file of kdf '{}'", f.kdf);
    let log_n = u8::try_from(f.N.trailing_zeros()).context("scrypt's N")?;
    anyhow::ensure!(
        f.N.is_power_of_two() && log_n <= LOG_N && f.r <= R && f.p <= P,
        "a restic key file of scrypt N={}, r={}, p={}: none of this node's",
        f.N,
        f.r,
        f.p
    );
    let decode = |s: &str| STANDARD.decode(s).context("decoding a restic key file");
    let keys = derive_with(password, &decode(&f.salt)?, log_n, f.r, f.p)?;
    let master = open(&keys, decode(&f.data)?).context("opening a restic key file")?;
    Ok(Zeroizing::new(master))
}

/// Poly1305-AES: Poly1305 keyed with `r` and AES-128_k(nonce).
fn mac(k: &[u8], r: &[u8], nonce: &[u8; 16], message: &[u8]) -> Result<[u8; 16]> {
    let mut s = aes::Block::from(*nonce);
    aes::Aes128::new_from_slice(k)
        .map_err(|e| anyhow::anyhow!("AES-128: {e}"))?
        .encrypt_block(&mut s);
    let mut key = Zeroizing::new([0u8; 32]);
    key[..16].copy_from_slice(r);
    key[16..].copy_from_slice(&s);
    let tag = poly1305::Poly1305::new_from_slice(key.as_ref())
        .map_err(|e| anyhow::anyhow!("Poly1305: {e}"))?
        .compute_unpadded(message);
    let mut out = [0u8; 16];
    out.copy_from_slice(&tag);
    Ok(out)
}

/// The plain-text part of a key file.
#[derive(Deserialize)]
struct KeyMeta {
    #[serde(default)]
    created: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    hostname: String,
}

/// Of the repository's key files (id, JSON): the key to try the operator's password on first
/// (the oldest not made by ag-box: restic gives up after trying 20 keys without a hint), and
/// the keys ag-box made earlier for `node` (a reinstalled node's, to remove).
pub(crate) fn sort_keys(keys: &[(String, Vec<u8>)], node: &str) -> (Option<String>, Vec<String>) {
    let mut metas: Vec<(&str, KeyMeta)> = keys
        .iter()
        .filter_map(|(id, b)| Some((id.as_str(), serde_json::from_slice(b).ok()?)))
        .collect();
    metas.sort_by(|a, b| a.1.created.cmp(&b.1.created));
    let operator = metas
        .iter()
        .find(|(_, m)| m.username != "ag-box")
        .map(|(id, _)| id.to_string());
    let earlier = metas
        .iter()
        .filter(|(_, m)| m.username == "ag-box" && m.hostname == node)
        .map(|(id, _)| id.to_string())
        .collect();
    (operator, earlier)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_sealed_with_a_password_opens_with_it_alone() {
        let random = Randomness {
            salt: [7; 64],
            iv: [9; 16],
        };
        let sealed = Sealer::new(b"pw", &random)
            .unwrap()
            .seal(b"the login".to_vec())
            .unwrap();
        assert_eq!(sealed.len(), 16 + 9 + 16);
        let open = |pw: &[u8], salt: &[u8], log_n, bytes: &[u8]| open_with(pw, salt, log_n, bytes);
        assert_eq!(
            open(b"pw", &random.salt, SEAL_LOG_N, &sealed).unwrap(),
            b"the login"
        );
        assert!(open(b"other", &random.salt, SEAL_LOG_N, &sealed).is_err());
        assert!(open(b"pw", &[8; 64], SEAL_LOG_N, &sealed).is_err());
        assert!(open(b"pw", &random.salt, 12, &sealed).is_err());
        assert!(open(b"pw", &random.salt, 40, &sealed).is_err());
        let mut changed = sealed.clone();
        changed[20] ^= 1;
        assert!(open(b"pw", &random.salt, SEAL_LOG_N, &changed).is_err());
        assert!(open(b"pw", &random.salt, SEAL_LOG_N, &sealed[..31]).is_err());
    }

    const MASTER: &str = r#"{
  "mac": {"k": "ZhbdPxHrjrINbQxOs8a27A==", "r": "5RlTC7CtqAOoATYAhEKcCQ=="},
  "encrypt": "q9Bz4hM7Jrvhmu0ZK6c6lY2V4j1G3LwUa3y5O3bJ2fI="
}"#;

    fn random() -> Randomness {
        Randomness {
            salt: [7; 64],
            iv: [9; 16],
        }
    }

    #[test]
    fn the_key_file_restic_reads() {
        let (id, bytes) = key_file(
            MASTER.as_bytes(),
            b"secret",
            &random(),
            "2026-11-30T12:00:00Z",
            "node-a",
        )
        .unwrap();
        let file: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let data = STANDARD.decode(file["data"].as_str().unwrap()).unwrap();
        let keys = derive(b"secret", &[7; 64]).unwrap();
        let (iv, rest) = data.split_at(16);
        let (ciphertext, tag) = rest.split_at(rest.len() - 16);
        assert_eq!(
            mac(&keys[32..48], &keys[48..64], &[9; 16], ciphertext).unwrap(),
            tag,
            "authenticated under the derived MAC key"
        );
        let mut plain = ciphertext.to_vec();
        ctr::Ctr128BE::<aes::Aes256>::new_from_slices(&keys[..32], iv)
            .unwrap()
            .apply_keystream(&mut plain);
        let mut shown = file.clone();
        shown["data"] = serde_json::Value::Null;
        pretty_assertions::assert_eq!(
            (
                serde_json::from_slice::<serde_json::Value>(&plain).unwrap(),
                shown,
                id
            ),
            (
                serde_json::from_str::<serde_json::Value>(MASTER).unwrap(),
                serde_json::json!({
                    "created": "2026-11-30T12:00:00Z", "username": "ag-box", "hostname": "node-a",
                    "kdf": "scrypt", "N": 4096, "r": 8, "p": 1,
                    "salt": STANDARD.encode([7u8; 64]), "data": null,
                }),
                hex(&Sha256::digest(&bytes)),
            )
        );
    }

    #[test]
    fn a_nodes_key_file_opens_to_the_master_key_with_its_password_alone() {
        let (_, file) = key_file(MASTER.as_bytes(), b"secret", &random(), "t", "node-a").unwrap();
        let master = open_key_file(&file, b"secret").unwrap();
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&master).unwrap(),
            serde_json::from_str::<serde_json::Value>(MASTER).unwrap()
        );
        assert_eq!(
            open_key_file(&file, b"other").unwrap_err().to_string(),
            "opening a restic key file"
        );
        // The operator's key, calibrated by restic, costs too much to open on every park.
        let mut costly: serde_json::Value = serde_json::from_slice(&file).unwrap();
        costly["N"] = 32768.into();
        assert_eq!(
            open_key_file(&serde_json::to_vec(&costly).unwrap(), b"secret")
                .unwrap_err()
                .to_string(),
            "a restic key file of scrypt N=32768, r=8, p=1: none of this node's"
        );
    }

    #[test]
    fn sealed_under_the_master_key_opens_only_unaltered_and_under_it() {
        let keys = master_keys(MASTER.as_bytes()).unwrap();
        let sealed = seal_under(&keys, &[3; 16], b"the changes".to_vec()).unwrap();
        assert_eq!(sealed.len(), 16 + 11 + 16);
        assert_eq!(open_under(&keys, sealed.clone()).unwrap(), b"the changes");
        for at in [0, 16, sealed.len() - 1] {
            let mut altered = sealed.clone();
            altered[at] ^= 1;
            assert!(open_under(&keys, altered).is_err(), "byte {at} altered");
        }
        let mut other = keys.clone();
        other[0] ^= 1;
        other[40] ^= 1;
        assert!(open_under(&other, sealed.clone()).is_err());
        // What restic sealed under the master key itself never opens under ag-box's keys.
        let own = subkeys(&keys, "ag-box test").unwrap();
        assert!(open_under(&own, sealed.clone()).is_err());
        assert_ne!(*own, *subkeys(&keys, "ag-box other").unwrap());
        assert_eq!(*own, *subkeys(&keys, "ag-box test").unwrap());
        assert!(open_under(&keys, sealed[..31].to_vec()).is_err());
        assert_eq!(
            master_keys(br#"{"mac": {"k": "AA==", "r": "AA=="}, "encrypt": "AA=="}"#)
                .unwrap_err()
                .to_string(),
            "restic's master key has a part of the wrong length"
        );
    }

    #[test]
    fn poly1305_aes_of_the_published_example() {
        // D. J. Bernstein, "The Poly1305-AES message-authentication code", appendix B, 2nd example.
        let unhex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let k = unhex("ec074c835580741701425b623235add6");
        let r = unhex("851fc40c3467ac0be05cc20404f3f700");
        let nonce: [u8; 16] = unhex("fb447350c4e868c52ac3275cf9d4327e")
            .try_into()
            .unwrap();
        let tag = mac(&k, &r, &nonce, &unhex("f3f6")).unwrap();
        assert_eq!(hex(&tag), "f4c633c3044fc145f84f335cb81953de");
    }

    #[test]
    fn the_operators_key_and_a_nodes_earlier_ones() {
        let key = |id: &str, created: &str, user: &str, host: &str| {
            let json = serde_json::json!({"created": created, "username": user, "hostname": host});
            (id.to_string(), serde_json::to_vec(&json).unwrap())
        };
        let keys = [
            key("n1", "2026-01-02T00:00:00Z", "ag-box", "node-a"),
            key("op2", "2026-01-03T00:00:00Z", "root", "vm"),
            key("op1", "2026-01-01T00:00:00Z", "root", "vm"),
            key("n2", "2026-01-04T00:00:00Z", "ag-box", "node-b"),
            key("n3", "2026-01-05T00:00:00Z", "ag-box", "node-a"),
            ("garbage".to_string(), b"not json".to_vec()),
        ];
        assert_eq!(
            sort_keys(&keys, "node-a"),
            (
                Some("op1".to_string()),
                vec!["n1".to_string(), "n3".to_string()]
            )
        );
    }

    #[test]
    fn not_a_master_key_is_refused() {
        let err = key_file(b"{}", b"p", &random(), "t", "h").unwrap_err();
        assert_eq!(err.to_string(), "restic's master key lacks its fields");
    }
}
