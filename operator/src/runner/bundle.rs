//! A saved plan's bundle: the plan file with the dependency lock file it was made with.

use std::io;

/// The dependency lock file `init` writes.
pub const LOCK_FILE: &str = ".terraform.lock.hcl";
/// Names inside the plan bundle.
pub(super) const BUNDLE_PLAN: &str = "tfplan";
pub(super) const BUNDLE_LOCK: &str = "lock.hcl";

/// The plan bundle the plan Pod uploads: a tar.gz of the plan file and, when `init` wrote
/// one, the dependency lock file.
pub fn make_bundle(plan: &[u8], lock: Option<&[u8]>) -> io::Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    let mut add = |name: &str, bytes: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o600);
        header.set_cksum();
        tar.append_data(&mut header, name, bytes)
    };
    add(BUNDLE_PLAN, plan)?;
    if let Some(lock) = lock {
        add(BUNDLE_LOCK, lock)?;
    }
    tar.into_inner()?.finish()
}

/// The plan file and the lock file of a [`make_bundle`] bundle.
pub fn open_bundle(bundle: &[u8]) -> io::Result<(Vec<u8>, Option<Vec<u8>>)> {
    use std::io::Read;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bundle));
    let (mut plan, mut lock) = (None, None);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        match entry.path()?.to_str() {
            Some(BUNDLE_PLAN) => plan = Some(bytes),
            Some(BUNDLE_LOCK) => lock = Some(bytes),
            _ => {}
        }
    }
    let plan = plan.ok_or_else(|| io::Error::other("no plan file in the bundle"))?;
    Ok((plan, lock))
}
