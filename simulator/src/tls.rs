//! HTTPS for the simulator: a self-signed CA and a serving certificate for the loopback
//! names, for the TLS handshakes of [`crate::listener`].
//!
//! kubectl (client-go) sends a kubeconfig's bearer token only over TLS, so the simulator
//! is served over HTTPS and the kubeconfig carries the CA (`certificate-authority-data`).
//! The CA and the serving certificate (for `localhost`, `127.0.0.1`, `::1`) are created
//! with rcgen once and kept under `DATA_DIR/tls/` (in memory without a data directory),
//! so kubeconfigs written earlier keep verifying after a restart. The CA's private key is
//! not kept: nothing is signed after the serving certificate. Connections flow: TCP
//! accept → TLS handshake in the connection's own task (a slow client blocks no one;
//! [`HANDSHAKE_TIMEOUT`]) → hyper (HTTP/1.1, negotiated by ALPN), see [`crate::listener`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Names the serving certificate is valid for.
pub const SERVING_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Longest a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {detail}")]
    Parse { path: String, detail: String },
    #[error("configuring TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The CA and the serving certificate and key, PEM-encoded, with the rustls server
/// configuration built from them.
#[derive(Clone)]
pub struct TlsMaterial {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// A fresh CA and a serving certificate it signs.
    pub fn generate() -> Result<TlsMaterial, TlsError> {
        let today = jiff::Timestamp::now()
            .to_zoned(jiff::tz::TimeZone::UTC)
            .date();
        let date = |years: i16| {
            let d = today
                .saturating_add(jiff::Span::new().years(years))
                .saturating_sub(jiff::Span::new().days(1));
            rcgen::date_time_ymd(
                i32::from(d.year()),
                d.month().unsigned_abs(),
                d.day().unsigned_abs(),
            )
        };
        let (not_before, not_after) = (date(0), date(10));

        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name = rcgen::DistinguishedName::new();
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "terrace simulator CA");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        ca.not_before = not_before;
        ca.not_after = not_after;
        let ca_key = rcgen::KeyPair::generate()?;
        let ca = rcgen::CertifiedIssuer::self_signed(ca, ca_key)?;

        let names: Vec<String> = SERVING_NAMES.iter().map(|s| s.to_string()).collect();
        let mut leaf = rcgen::CertificateParams::new(names)?;
        leaf.distinguished_name = rcgen::DistinguishedName::new();
        leaf.distinguished_name
            .push(rcgen::DnType::CommonName, "terrace-simulator");
        leaf.key_usages = vec![
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::KeyEncipherment,
        ];
        leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        leaf.use_authority_key_identifier_extension = true;
        leaf.not_before = not_before;
        leaf.not_after = not_after;
        let key = rcgen::KeyPair::generate()?;
        let cert = leaf.signed_by(&key, &ca)?;
        TlsMaterial::from_pem(ca.pem(), cert.pem(), key.serialize_pem(), "generated")
    }

    fn from_pem(
        ca_pem: String,
        cert_pem: String,
        key_pem: String,
        origin: &str,
    ) -> Result<TlsMaterial, TlsError> {
        let parse = |detail: String| TlsError::Parse {
            path: origin.to_string(),
            detail,
        };
        CertificateDer::from_pem_slice(ca_pem.as_bytes())
            .map_err(|e| parse(format!("CA certificate: {e}")))?;
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| parse(format!("serving certificate: {e}")))?;
        if chain.is_empty() {
            return Err(parse("no serving certificate".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| parse(format!("serving key: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsMaterial {
            ca_pem,
            cert_pem,
            key_pem,
            config: Arc::new(config),
        })
    }

    /// Loads `dir/ca.crt`, `dir/tls.crt` and `dir/tls.key`, or generates and writes them
    /// when any is missing (blocking I/O).
    pub fn load_or_create(dir: &Path) -> Result<TlsMaterial, TlsError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| TlsError::Io { path, source }
        };
        let (ca, cert, key) = (dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"));
        if ca.exists() && cert.exists() && key.exists() {
            let read = |p: &Path| std::fs::read_to_string(p).map_err(io(p));
            return TlsMaterial::from_pem(
                read(&ca)?,
                read(&cert)?,
                read(&key)?,
                &dir.display().to_string(),
            );
        }
        let m = TlsMaterial::generate()?;
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        write_file(&key, &m.key_pem, true).map_err(io(&key))?;
        write_file(&cert, &m.cert_pem, false).map_err(io(&cert))?;
        write_file(&ca, &m.ca_pem, false).map_err(io(&ca))?;
        Ok(m)
    }

    /// The CA certificate (PEM) clients trust: the kubeconfig's
    /// `certificate-authority-data`.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The serving certificate (PEM).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The rustls configuration (ring provider, HTTP/1.1 by ALPN, no client certificates).
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.config.clone()
    }
}

/// Writes through a temporary file so a crash never leaves half a key behind.
fn write_file(path: &Path, contents: &str, private: bool) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents)?;
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    }
    #[cfg(not(unix))]
    let _ = private;
    std::fs::rename(&tmp, path)
}
