//! Deployment safety on a real server with SmolLM2-135M: the API key (401 in OpenAI's
//! shape, `/health` open, `/metrics` protected unless public), CORS, and the connection
//! limit. Slow clients, idle connections, the 503 past the limit and malformed
//! keys are in `slowclient.rs`.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::start;
use kiln_server::ServerConfig;
use serde_json::{Value, json};

/// A request with extra headers: the status, the response headers and the body.
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, Vec<(String, String)>, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let url = format!("http://{addr}{path}");
    let mut r = match (method, body) {
        ("POST", Some(b)) => {
            let mut req = agent.post(&url).content_type("application/json");
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            req.send(b.to_string())
        }
        ("OPTIONS", _) => {
            let mut req = agent.options(&url);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            req.call()
        }
        _ => {
            let mut req = agent.get(&url);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            req.call()
        }
    }
    .expect("request");
    let hs = r
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let status = r.status().as_u16();
    (
        status,
        hs,
        r.body_mut().read_to_string().unwrap_or_default(),
    )
}

fn header<'a>(hs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    hs.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

const COMPLETION: &str = "/v1/completions";

fn completion() -> Value {
    json!({"prompt":"The capital of France is","max_tokens":4,"temperature":0})
}

#[test]
fn requests_without_the_key_get_openais_401_and_health_stays_open() {
    let addr = start(ServerConfig {
        api_keys: vec!["sk-local-1".into(), "sk-local-2".into()],
        ..ServerConfig::default()
    });
    let (status, _, body) = call(addr, "POST", COMPLETION, &[], Some(&completion()));
    assert_eq!(status, 401, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let wrong = [("authorization", "Bearer sk-local-3")];
    assert_eq!(
        call(addr, "POST", COMPLETION, &wrong, Some(&completion())).0,
        401
    );
    let prefix = [("authorization", "Bearer sk-local-")];
    assert_eq!(
        call(addr, "POST", COMPLETION, &prefix, Some(&completion())).0,
        401
    );
    for h in [
        ("authorization", "Bearer sk-local-1"),
        ("x-api-key", "sk-local-2"),
    ] {
        let (status, _, body) = call(addr, "POST", COMPLETION, &[h], Some(&completion()));
        assert_eq!(status, 200, "{h:?}: {body}");
    }
    for path in ["/v1/models", "/metrics", "/tokenize", "/nowhere"] {
        let method = if path == "/tokenize" { "POST" } else { "GET" };
        let (status, _, body) = call(addr, method, path, &[], Some(&json!({"content":"x"})));
        assert_eq!(status, 401, "{path}: {body}");
    }
    assert_eq!(call(addr, "GET", "/health", &[], None).0, 200);

    let public = start(ServerConfig {
        api_keys: vec!["k".into()],
        metrics_public: true,
        ..ServerConfig::default()
    });
    assert_eq!(call(public, "GET", "/metrics", &[], None).0, 200);
    assert_eq!(call(public, "GET", "/v1/models", &[], None).0, 401);
}

#[test]
fn cors_answers_preflights_and_marks_responses_for_allowed_origins_only() {
    let addr = start(ServerConfig {
        cors_origins: vec!["https://app.example".into()],
        api_keys: vec!["k".into()],
        ..ServerConfig::default()
    });
    let (status, hs, _) = call(
        addr,
        "OPTIONS",
        COMPLETION,
        &[
            ("origin", "https://app.example"),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "authorization, content-type",
            ),
        ],
        None,
    );
    assert_eq!(status, 204);
    assert_eq!(
        header(&hs, "access-control-allow-origin"),
        Some("https://app.example")
    );
    assert!(
        header(&hs, "access-control-allow-methods")
            .unwrap()
            .contains("POST")
    );
    assert!(
        header(&hs, "access-control-allow-headers")
            .unwrap()
            .contains("authorization")
    );
    let (status, hs, _) = call(
        addr,
        "POST",
        COMPLETION,
        &[("origin", "https://app.example"), ("x-api-key", "k")],
        Some(&completion()),
    );
    assert_eq!(status, 200);
    assert_eq!(
        header(&hs, "access-control-allow-origin"),
        Some("https://app.example")
    );
    let (_, hs, _) = call(
        addr,
        "GET",
        "/health",
        &[("origin", "https://evil.example")],
        None,
    );
    assert_eq!(header(&hs, "access-control-allow-origin"), None);
}

/// Reads until the server closes the connection or `within` passes; true if it closed.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let end = Instant::now() + within;
    let mut buf = [0u8; 512];
    while Instant::now() < end {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn connections_over_the_limit_are_closed_and_freed_slots_serve_again() {
    let addr = start(ServerConfig {
        max_connections: 2,
        ..ServerConfig::default()
    });
    let a = TcpStream::connect(addr).unwrap();
    let b = TcpStream::connect(addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut c = TcpStream::connect(addr).unwrap();
    let _ = c.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n");
    assert!(closed_within(&mut c, Duration::from_secs(2)));
    drop((a, b));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(call(addr, "GET", "/health", &[], None).0, 200);
}
