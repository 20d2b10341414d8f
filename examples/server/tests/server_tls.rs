//! TLS session resumption: a webhook sender opens a connection per alert, and its second connection resumes the
//! first one's session from the ticket the server sent, skipping the certificate and its signature.

mod server_support;

use rustls::client::Resumption;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{HandshakeKind, ProtocolVersion, SupportedProtocolVersion};
use server_support::*;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A sender trusting the server's certificate, speaking only `version`, with the given session store.
fn sender(server: &Server, version: &'static SupportedProtocolVersion, resumption: Resumption) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(server.data.join("cert.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.resumption = resumption;
    TlsConnector::from(Arc::new(config))
}

/// One request on a fresh connection with `Connection: close`; reads the whole answer (which also takes in the
/// session tickets the server sent after the handshake). Returns how the handshake went, the version and the
/// answer.
async fn exchange(
    tls: &TlsConnector,
    server: &Server,
    head: &str,
    body: &str,
) -> (Option<HandshakeKind>, Option<ProtocolVersion>, String) {
    let tcp = TcpStream::connect(server.webhook).await.unwrap();
    let mut stream = tls.connect(ServerName::try_from("localhost").unwrap(), tcp).await.expect("TLS handshake");
    let (kind, version) = (stream.get_ref().1.handshake_kind(), stream.get_ref().1.protocol_version());
    let request = format!(
        "{head} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    // The server closes after answering; its close_notify ends the read.
    stream.read_to_end(&mut answer).await.expect("the whole answer");
    (kind, version, String::from_utf8_lossy(&answer).into_owned())
}

/// Posts one distinct alert on a fresh connection.
async fn post_once(
    tls: &TlsConnector,
    server: &Server,
    token: &str,
    message_id: &str,
) -> (Option<HandshakeKind>, Option<ProtocolVersion>, String) {
    let body = format!(r#"{{"ticker":"AAPL","action":"buy","metadata":{{"message_id":"{message_id}"}}}}"#);
    exchange(tls, server, &format!("POST /webhooks/{token}"), &body).await
}

#[tokio::test]
async fn a_second_connection_resumes_the_first_ones_session() {
    let dirs = Dirs::new("tls-resume");
    let tok = token('a');
    dirs.write("s.json", &snapshot("s", &tok));
    let server = Server::start(&dirs, &[]);

    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        // One sender, one session store shared by its connections.
        let tls = sender(&server, version, Resumption::in_memory_sessions(8));
        let label = format!("{:?}", version.version);
        let (kind, v, answer) = post_once(&tls, &server, &tok, &format!("{label}-1")).await;
        assert_eq!((kind, v), (Some(HandshakeKind::Full), Some(version.version)), "{label}");
        assert!(answer.starts_with("HTTP/1.1 200"), "{label}: {answer}");
        assert!(answer.contains(r#""status":"processed""#), "{label}: {answer}");

        // More senders than a session cache of rustls' default size holds (256 sessions): a stateless ticket
        // does not depend on the server remembering anything of the first connection.
        let others = sender(&server, version, Resumption::disabled());
        for _ in 0..260 {
            let (_, _, answer) = exchange(&others, &server, "GET /healthz", "").await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{label}: {answer}");
        }
        let (kind, v, answer) = post_once(&tls, &server, &tok, &format!("{label}-2")).await;
        assert_eq!((kind, v), (Some(HandshakeKind::Resumed), Some(version.version)), "{label}: not resumed");
        assert!(answer.contains(r#""status":"processed""#), "{label}: a resumed connection is served: {answer}");

        // A sender without a session store (or a new one) gets a full handshake: what resumed was the ticket.
        let fresh = sender(&server, version, Resumption::disabled());
        let (kind, _, _) = post_once(&fresh, &server, &tok, &format!("{label}-3")).await;
        assert_eq!(kind, Some(HandshakeKind::Full), "{label}");
    }
    server.stop();
}
