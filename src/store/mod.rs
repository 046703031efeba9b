//! Box records: the `MetaStore` trait, its backends, and the compare-and-swap loop.

pub mod lease;
pub mod local;
pub mod meta;
pub mod s3;

use anyhow::{Result, bail};

use crate::error::UserError;
use meta::Meta;

/// Opaque token of one stored version (an ETag on S3, a revision number locally).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version(pub String);

#[derive(Debug, Clone)]
pub struct Stored {
    pub meta: Meta,
    pub version: Version,
}

/// Outcome of a conditional write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cas {
    Written,
    /// Someone else wrote first: re-read and decide again.
    Conflict,
}

pub trait MetaStore {
    /// Where records live, for `status`.
    fn describe(&self) -> String;
    fn get(&self, name: &str) -> Result<Option<Stored>>;
    /// Write `meta`; `expected` None means "create only if absent".
    fn put(&self, meta: &Meta, expected: Option<&Version>) -> Result<Cas>;
    fn delete(&self, name: &str, expected: &Version) -> Result<Cas>;
    fn list(&self) -> Result<Vec<Meta>>;
    /// Does the backend refuse a second create of `probe_key`? (Leases depend on it.)
    fn conditional_writes(&self, probe_key: &str) -> Result<bool> {
        let _ = probe_key;
        Ok(true)
    }
    /// The backend is there and our credentials work.
    fn check_reachable(&self) -> Result<()> {
        Ok(())
    }
}

/// What a decision function wants done with the record it was shown.
#[allow(clippy::large_enum_variant)] // short-lived, one per CAS attempt
pub enum Step<T> {
    Write(Meta, T),
    Keep(T),
}

const MAX_ATTEMPTS: usize = 50;

pub fn unknown_box(name: &str) -> UserError {
    UserError::failed(
        format!("box '{name}' is not tracked"),
        format!("run 'ag-box track {name} [path]' first, or 'ag-box ls' to see the boxes"),
    )
}

/// Read-decide-write until the write lands on the version that was read.
pub fn update<T>(
    store: &dyn MetaStore,
    name: &str,
    mut decide: impl FnMut(&Meta) -> Result<Step<T>>,
) -> Result<T> {
    for _ in 0..MAX_ATTEMPTS {
        let Some(stored) = store.get(name)? else {
            return Err(unknown_box(name).into());
        };
        match decide(&stored.meta)? {
            Step::Keep(out) => return Ok(out),
            Step::Write(next, out) => {
                if store.put(&next, Some(&stored.version))? == Cas::Written {
                    return Ok(out);
                }
                tracing::debug!(box_name = name, "record changed under us; deciding again");
            }
        }
    }
    bail!("box '{name}': gave up after {MAX_ATTEMPTS} conflicting writes to its record")
}

pub fn get_existing(store: &dyn MetaStore, name: &str) -> Result<Stored> {
    store.get(name)?.ok_or_else(|| unknown_box(name).into())
}
