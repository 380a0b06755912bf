//! HTTPS: a self-signed certificate made here (rcgen), a client that trusts it, and the
//! guards over TLS (API key, header timeout); plain HTTP to the TLS port gets a clean 400
//! and a close; a missing, empty or mismatched certificate or key is a typed error naming
//! the file. The server needs no model (it answers while "loading").

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_server::tls::{self, TlsError};
use kiln_server::{AppState, ServerConfig};
use tokio_rustls::rustls;

/// A fresh directory for this test's files.
fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-tls-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// A self-signed certificate for `localhost` / 127.0.0.1: (cert PEM, key PEM, cert DER).
fn self_signed() -> (String, String, Vec<u8>) {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("certificate");
    (cert.pem(), signing_key.serialize_pem(), cert.der().to_vec())
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

/// One HTTPS request (`connection: close`) with a client that trusts only `ca_der`:
/// status and body.
fn https(addr: SocketAddr, ca_der: &[u8], head: &str) -> (u16, String) {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from(ca_der.to_vec()))
        .expect("root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
    let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
    let sock = TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut tls = rustls::StreamOwned::new(conn, sock);
    tls.write_all(head.as_bytes()).expect("send over TLS");
    let mut got = Vec::new();
    // The server closes after `connection: close`; a missing close_notify is not an error
    // worth failing over once the answer is in.
    let _ = tls.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|t| t.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

fn get(path: &str, headers: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n{headers}\r\n")
}

#[test]
fn https_serves_with_the_guards_and_plain_http_to_the_tls_port_fails_cleanly() {
    let dir = temp_dir("serve");
    let (cert_pem, key_pem, der) = self_signed();
    let cert = write(&dir, "cert.pem", &cert_pem);
    let key = write(&dir, "key.pem", &key_pem);
    let config = ServerConfig {
        tls: Some(tls::load(&cert, &key).expect("load the certificate and key")),
        api_keys: vec!["sk-tls".into()],
        header_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    };
    let addr = kiln_testkit::server::serve(AppState::loading(config));

    // `/health` is open (503: no model is loading here); the rest needs the key.
    let (status, body) = https(addr, &der, &get("/health", ""));
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("loading"), "{body}");
    let (status, body) = https(addr, &der, &get("/v1/models", ""));
    assert_eq!(status, 401, "{body}");
    let (status, body) = https(
        addr,
        &der,
        &get("/v1/models", "authorization: Bearer sk-tls\r\n"),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"object\":\"list\""), "{body}");

    // Plain HTTP: a readable 400 naming TLS, then the close.
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(get("/health", "").as_bytes()).expect("send");
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("tls_required"), "{text}");

    // A connection that starts a handshake and stalls is closed at the header timeout.
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let t = Instant::now();
    s.write_all(&[0x16, 0x03, 0x01]).expect("send");
    let mut buf = [0u8; 64];
    let closed = matches!(s.read(&mut buf), Ok(0) | Err(_));
    assert!(
        closed && t.elapsed() < Duration::from_secs(10),
        "a stalled handshake was held {:?}",
        t.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unusable_certificates_and_keys_are_typed_errors_naming_the_file() {
    let dir = temp_dir("errors");
    let (cert_pem, key_pem, _) = self_signed();
    let (_, other_key_pem, _) = self_signed();
    let cert = write(&dir, "cert.pem", &cert_pem);
    let key = write(&dir, "key.pem", &key_pem);
    let other_key = write(&dir, "other-key.pem", &other_key_pem);
    let empty = write(&dir, "empty.pem", "not a PEM file\n");
    let missing = dir.join("missing.pem");

    let e = tls::load(&missing, &key).unwrap_err();
    assert!(matches!(e, TlsError::Read { .. }), "{e:?}");
    assert!(e.to_string().contains("missing.pem"), "{e}");
    let e = tls::load(&cert, &missing).unwrap_err();
    assert!(
        matches!(e, TlsError::Read { what: "key", .. }) && e.to_string().contains("missing.pem"),
        "{e}"
    );
    let e = tls::load(&empty, &key).unwrap_err();
    assert!(matches!(e, TlsError::NoCertificate { .. }), "{e:?}");
    assert!(e.to_string().contains("empty.pem"), "{e}");
    let e = tls::load(&cert, &empty).unwrap_err();
    assert!(matches!(e, TlsError::NoKey { .. }), "{e:?}");
    assert!(e.to_string().contains("empty.pem"), "{e}");
    // A key file given as the certificate holds no certificate.
    let e = tls::load(&key, &key).unwrap_err();
    assert!(matches!(e, TlsError::NoCertificate { .. }), "{e:?}");
    let e = tls::load(&cert, &other_key).unwrap_err();
    assert!(matches!(e, TlsError::Mismatch { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("other-key.pem") && text.contains("cert.pem"),
        "{text}"
    );
    tls::load(&cert, &key).expect("the matching pair loads");
    let _ = std::fs::remove_dir_all(&dir);
}
