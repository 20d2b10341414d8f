//! The server's certificate: given with `--cert`/`--key`, or self-signed on first start and kept in the data
//! directory so that a client that pinned it (`curl --cacert`) keeps working across restarts.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// TLS 1.3 tickets sent after each handshake: a ticket is good for one resumption, and a sender that opens a
/// second connection before its first closes needs a second one.
const TLS13_TICKETS: usize = 2;

/// What the banner says about the certificate.
pub struct CertInfo {
    /// The certificate file in use.
    pub cert_path: PathBuf,
    /// SHA-256 of the leaf certificate (DER), as colon-separated hex.
    pub fingerprint: String,
    /// Whether this is the server's own self-signed certificate (so clients need `-k` or `--cacert`).
    pub self_signed: bool,
    /// Whether it was generated during this start.
    pub generated: bool,
}

/// Loads the given certificate and key, or the self-signed pair in `data_dir` (generating it when missing),
/// and builds the rustls configuration (ring provider, TLS 1.2 and 1.3, HTTP/1.1 by ALPN, stateless session
/// tickets).
pub fn server_config(
    cert: Option<&Path>,
    key: Option<&Path>,
    data_dir: &Path,
) -> Result<(Arc<ServerConfig>, CertInfo), String> {
    let (cert_path, key_path, self_signed, generated) = match (cert, key) {
        (Some(c), Some(k)) => (c.to_path_buf(), k.to_path_buf(), false, false),
        _ => {
            let c = data_dir.join("cert.pem");
            let k = data_dir.join("key.pem");
            let generated = if c.exists() && k.exists() {
                false
            } else {
                generate(&c, &k)?;
                true
            };
            (c, k, true, generated)
        }
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("cannot read the certificate {}: {e}", cert_path.display()))?;
    let leaf = certs.first().ok_or_else(|| format!("no certificate in {}", cert_path.display()))?;
    let fingerprint = fingerprint(leaf);
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| format!("cannot read the private key {}: {e}", key_path.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key do not form a usable pair: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Webhook senders open a connection per alert. A resumed TLS 1.3 handshake skips the certificate, its
    // signature here and its verification at the sender. Stateless tickets (sealed with ChaCha20-Poly1305 under
    // keys that live in memory only and rotate every 6 hours, so a restart or a rotation only costs senders one
    // full handshake) resume however many senders there are and keep nothing per client: the default session
    // cache holds 256 sessions, and with more senders than that most of them never resumed.
    config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| format!("TLS session tickets: {e}"))?;
    config.send_tls13_tickets = TLS13_TICKETS;
    Ok((Arc::new(config), CertInfo { cert_path, fingerprint, self_signed, generated }))
}

/// A self-signed certificate for `localhost` and `127.0.0.1`; the key file is readable by the owner only.
fn generate(cert_path: &Path, key_path: &Path) -> Result<(), String> {
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    let ck = rcgen::generate_simple_self_signed(names).map_err(|e| format!("cannot generate a certificate: {e}"))?;
    crate::datadir::write_private(key_path, ck.key_pair.serialize_pem().as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", key_path.display()))?;
    std::fs::write(cert_path, ck.cert.pem()).map_err(|e| format!("cannot write {}: {e}", cert_path.display()))?;
    Ok(())
}

fn fingerprint(cert: &CertificateDer<'_>) -> String {
    let digest = Sha256::digest(cert.as_ref());
    let mut s = String::with_capacity(95);
    for (i, b) in digest.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        let _ = write!(s, "{b:02X}");
    }
    s
}
