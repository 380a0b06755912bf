//! KV-cache events on a ZMQ PUB socket in vLLM's wire format, for routers that route by
//! which replica holds which prefix (vllm-router's `kv_aware` policy, the Gateway API
//! Inference Extension's precise prefix scorer).
//!
//! Each engine batch ([`KvEventBatch`], one per scheduler step that changed the prefix
//! cache) is one three-frame message: the topic, a sequence number (8 bytes, big-endian,
//! from 0), and a msgpack payload laid out as vLLM's array-like structs:
//! `[ts, [event, …]]` with `["BlockStored", [hash], parent_hash | nil, [token ids],
//! block_size, nil (lora_id), "GPU" (medium), nil (lora_name)]`, `["BlockRemoved",
//! [hash], "GPU"]` and `["AllBlocksCleared"]`. Hashes are unsigned 64-bit integers.
//! With [`KvEventEncoding::Map`] each event is instead a map tagged by `type` with the same
//! fields by name (`{"type": "BlockStored", "block_hashes": [hash], "parent_block_hash":
//! …}`): vllm-router's `kv_aware` policy decodes only that form.
//!
//! The publisher runs on a thread of its own and takes batches from the engine's bounded
//! queue, so a slow or absent subscriber never stalls the scheduler (the engine drops and
//! counts batches instead: `kiln_kv_event_batches_dropped_total`).

use bytes::Bytes;
use kiln_engine::{KvEvent, KvEventBatch};
use zeromq::{Socket, SocketSend, ZmqMessage};

/// Where and how to publish.
#[derive(Clone, Debug)]
pub struct KvEventsConfig {
    /// `tcp://*:5557` (or any address with `*`) binds; `tcp://host:port` connects.
    pub endpoint: String,
    /// The first frame of every message (`""`: vLLM's default; the Gateway API Inference
    /// Extension expects `kv@<pod>@<model>`).
    pub topic: String,
    /// How each event is laid out in the payload.
    pub encoding: KvEventEncoding,
}

/// The msgpack layout of one event (the batch is `[ts, [event, …]]` either way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvEventEncoding {
    /// vLLM's array-like structs, the tag first: `["BlockStored", [hash], parent, …]`
    /// (what msgspec's `array_like` structs and the Gateway API Inference Extension read).
    #[default]
    Array,
    /// Maps tagged by `type` with named fields: `{"type": "BlockStored", "block_hashes":
    /// [hash], …}` (what vllm-router's `kv_aware` policy reads).
    Map,
}

/// Publishing could not start.
#[derive(Debug, thiserror::Error)]
pub enum KvEventsError {
    #[error(
        "--kv-events {endpoint:?}: {why} (expected tcp://*:PORT or tcp://HOST:PORT to bind, or tcp://HOST:PORT to connect)"
    )]
    Endpoint { endpoint: String, why: String },
    #[error("cannot start the KV-event publisher thread: {0}")]
    Thread(std::io::Error),
}

fn bytes_len(out: &mut Vec<u8>, small: u8, n: usize, codes: [u8; 3]) {
    if n < 16 && small == 0x90 || n < 32 && small == 0xa0 {
        out.push(small | n as u8);
    } else if n <= u8::MAX as usize && codes[0] != 0 {
        out.extend_from_slice(&[codes[0], n as u8]);
    } else if n <= u16::MAX as usize {
        out.push(codes[1]);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(codes[2]);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// msgpack array header of `n` elements.
fn array(out: &mut Vec<u8>, n: usize) {
    bytes_len(out, 0x90, n, [0, 0xdc, 0xdd]);
}

fn string(out: &mut Vec<u8>, s: &str) {
    bytes_len(out, 0xa0, s.len(), [0xd9, 0xda, 0xdb]);
    out.extend_from_slice(s.as_bytes());
}

/// msgpack unsigned integer, smallest form.
fn uint(out: &mut Vec<u8>, v: u64) {
    if v < 128 {
        out.push(v as u8);
    } else if v <= u8::MAX as u64 {
        out.extend_from_slice(&[0xcc, v as u8]);
    } else if v <= u16::MAX as u64 {
        out.push(0xcd);
        out.extend_from_slice(&(v as u16).to_be_bytes());
    } else if v <= u32::MAX as u64 {
        out.push(0xce);
        out.extend_from_slice(&(v as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

const NIL: u8 = 0xc0;

/// msgpack map header of `n` entries (`n` < 16: every event has at most 8 fields).
fn map(out: &mut Vec<u8>, n: usize) {
    debug_assert!(n < 16);
    out.push(0x80 | n as u8);
}

/// The msgpack payload of one batch (vLLM's `KVEventBatch`, array-like).
pub fn encode_batch(batch: &KvEventBatch, out: &mut Vec<u8>) {
    encode_batch_as(batch, KvEventEncoding::Array, out);
}

/// The msgpack payload of one batch, each event laid out as `encoding` says.
pub fn encode_batch_as(batch: &KvEventBatch, encoding: KvEventEncoding, out: &mut Vec<u8>) {
    out.clear();
    array(out, 2);
    out.push(0xcb);
    out.extend_from_slice(&batch.ts.to_be_bytes());
    array(out, batch.events.len());
    for e in &batch.events {
        if encoding == KvEventEncoding::Map {
            encode_map_event(e, batch.block_size, out);
            continue;
        }
        match e {
            KvEvent::BlockStored {
                hash,
                parent,
                tokens,
            } => {
                array(out, 8);
                string(out, "BlockStored");
                array(out, 1);
                uint(out, *hash);
                match parent {
                    Some(p) => uint(out, *p),
                    None => out.push(NIL),
                }
                array(out, tokens.len());
                for &t in tokens {
                    uint(out, u64::from(t));
                }
                uint(out, batch.block_size as u64);
                out.push(NIL);
                string(out, "GPU");
                out.push(NIL);
            }
            KvEvent::BlockRemoved { hash } => {
                array(out, 3);
                string(out, "BlockRemoved");
                array(out, 1);
                uint(out, *hash);
                string(out, "GPU");
            }
            KvEvent::AllBlocksCleared => {
                array(out, 1);
                string(out, "AllBlocksCleared");
            }
        }
    }
}

/// One event as a map tagged by `type`, the fields named as vLLM names them.
fn encode_map_event(e: &KvEvent, block_size: usize, out: &mut Vec<u8>) {
    match e {
        KvEvent::BlockStored {
            hash,
            parent,
            tokens,
        } => {
            map(out, 8);
            string(out, "type");
            string(out, "BlockStored");
            string(out, "block_hashes");
            array(out, 1);
            uint(out, *hash);
            string(out, "parent_block_hash");
            match parent {
                Some(p) => uint(out, *p),
                None => out.push(NIL),
            }
            string(out, "token_ids");
            array(out, tokens.len());
            for &t in tokens {
                uint(out, u64::from(t));
            }
            string(out, "block_size");
            uint(out, block_size as u64);
            string(out, "lora_id");
            out.push(NIL);
            string(out, "medium");
            string(out, "GPU");
            string(out, "lora_name");
            out.push(NIL);
        }
        KvEvent::BlockRemoved { hash } => {
            map(out, 3);
            string(out, "type");
            string(out, "BlockRemoved");
            string(out, "block_hashes");
            array(out, 1);
            uint(out, *hash);
            string(out, "medium");
            string(out, "GPU");
        }
        KvEvent::AllBlocksCleared => {
            map(out, 1);
            string(out, "type");
            string(out, "AllBlocksCleared");
        }
    }
}

/// The endpoint to bind (`Some`, with `*` as every interface) or to connect to.
fn target(endpoint: &str) -> Result<(bool, String), String> {
    let rest = endpoint
        .strip_prefix("tcp://")
        .ok_or("only tcp:// endpoints are supported")?;
    let (host, port) = rest.rsplit_once(':').ok_or("no port")?;
    port.parse::<u16>()
        .map_err(|_| format!("port {port:?} is not a number from 0 to 65535"))?;
    if host.is_empty() {
        return Err("no host".into());
    }
    Ok(if host == "*" {
        (true, format!("tcp://0.0.0.0:{port}"))
    } else if host.contains('*') || host.contains("::") {
        (true, endpoint.replace('*', "0.0.0.0"))
    } else {
        (false, endpoint.to_string())
    })
}

/// Binds or connects the PUB socket (returning once it is), then publishes every batch
/// `rx` yields on a thread of its own until the engine stops.
pub fn start(
    rx: flume::Receiver<KvEventBatch>,
    config: KvEventsConfig,
) -> Result<std::thread::JoinHandle<()>, KvEventsError> {
    let bad = |why: String| KvEventsError::Endpoint {
        endpoint: config.endpoint.clone(),
        why,
    };
    let (bind, addr) = target(&config.endpoint).map_err(bad)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(KvEventsError::Thread)?;
    // The socket spawns its fan-out task on the runtime it is made in; the publisher
    // thread drives that runtime from then on.
    let mut socket = {
        let _in_runtime = rt.enter();
        zeromq::PubSocket::new()
    };
    rt.block_on(async {
        if bind {
            socket.bind(&addr).await.map(|_| ())
        } else {
            socket.connect(&addr).await
        }
    })
    .map_err(|e| bad(e.to_string()))?;
    std::thread::Builder::new()
        .name("kiln-kv-events".into())
        .spawn(move || rt.block_on(publish(socket, rx, config.topic, config.encoding)))
        .map_err(KvEventsError::Thread)
}

async fn publish(
    mut socket: zeromq::PubSocket,
    rx: flume::Receiver<KvEventBatch>,
    topic: String,
    encoding: KvEventEncoding,
) {
    let mut payload = Vec::with_capacity(4096);
    let mut seq: u64 = 0;
    let topic = Bytes::from(topic.into_bytes());
    while let Ok(batch) = rx.recv_async().await {
        encode_batch_as(&batch, encoding, &mut payload);
        let frames = vec![
            topic.clone(),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            Bytes::copy_from_slice(&payload),
        ];
        if let Ok(msg) = ZmqMessage::try_from(frames)
            && let Err(e) = socket.send(msg).await
        {
            eprintln!("kiln serve: KV event batch {seq} not sent: {e}");
        }
        seq += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_with_a_star_bind_others_connect_and_bad_ones_are_refused() {
        assert_eq!(
            target("tcp://*:5557").unwrap(),
            (true, "tcp://0.0.0.0:5557".into())
        );
        assert_eq!(
            target("tcp://10.0.0.2:5557").unwrap(),
            (false, "tcp://10.0.0.2:5557".into())
        );
        assert!(target("ipc:///tmp/x").is_err());
        assert!(target("tcp://*:99999").is_err());
        assert!(target("tcp://:1").is_err());
    }

    #[test]
    fn a_batch_encodes_as_vllms_array_like_msgpack() {
        let batch = KvEventBatch {
            ts: 1.5,
            block_size: 2,
            events: vec![
                KvEvent::AllBlocksCleared,
                KvEvent::BlockStored {
                    hash: 300,
                    parent: None,
                    tokens: vec![1, 70000],
                },
                KvEvent::BlockRemoved { hash: u64::MAX },
            ],
        };
        let mut out = Vec::new();
        encode_batch(&batch, &mut out);
        let mut want = vec![0x92, 0xcb];
        want.extend_from_slice(&1.5f64.to_be_bytes());
        want.push(0x93);
        want.push(0x91);
        want.push(0xa0 | 16);
        want.extend_from_slice(b"AllBlocksCleared");
        want.extend_from_slice(&[0x98, 0xa0 | 11]);
        want.extend_from_slice(b"BlockStored");
        want.extend_from_slice(&[0x91, 0xcd, 0x01, 0x2c, NIL, 0x92, 0x01, 0xce]);
        want.extend_from_slice(&70000u32.to_be_bytes());
        want.extend_from_slice(&[0x02, NIL, 0xa3]);
        want.extend_from_slice(b"GPU");
        want.push(NIL);
        want.extend_from_slice(&[0x93, 0xa0 | 12]);
        want.extend_from_slice(b"BlockRemoved");
        want.extend_from_slice(&[0x91, 0xcf]);
        want.extend_from_slice(&u64::MAX.to_be_bytes());
        want.extend_from_slice(&[0xa3]);
        want.extend_from_slice(b"GPU");
        assert_eq!(out, want);
    }

    #[test]
    fn map_encoding_tags_each_event_by_type_with_named_fields() {
        let batch = KvEventBatch {
            ts: 2.0,
            block_size: 16,
            events: vec![
                KvEvent::AllBlocksCleared,
                KvEvent::BlockStored {
                    hash: 7,
                    parent: Some(6),
                    tokens: vec![3],
                },
                KvEvent::BlockRemoved { hash: 7 },
            ],
        };
        let mut out = Vec::new();
        encode_batch_as(&batch, KvEventEncoding::Map, &mut out);
        let mut want = vec![0x92, 0xcb];
        want.extend_from_slice(&2.0f64.to_be_bytes());
        want.push(0x93);
        let s = |w: &mut Vec<u8>, t: &str| {
            w.push(0xa0 | t.len() as u8);
            w.extend_from_slice(t.as_bytes());
        };
        want.push(0x81);
        s(&mut want, "type");
        s(&mut want, "AllBlocksCleared");
        want.push(0x88);
        s(&mut want, "type");
        s(&mut want, "BlockStored");
        s(&mut want, "block_hashes");
        want.extend_from_slice(&[0x91, 7]);
        s(&mut want, "parent_block_hash");
        want.push(6);
        s(&mut want, "token_ids");
        want.extend_from_slice(&[0x91, 3]);
        s(&mut want, "block_size");
        want.push(16);
        s(&mut want, "lora_id");
        want.push(NIL);
        s(&mut want, "medium");
        s(&mut want, "GPU");
        s(&mut want, "lora_name");
        want.push(NIL);
        want.push(0x83);
        s(&mut want, "type");
        s(&mut want, "BlockRemoved");
        s(&mut want, "block_hashes");
        want.extend_from_slice(&[0x91, 7]);
        s(&mut want, "medium");
        s(&mut want, "GPU");
        assert_eq!(out, want);
        // The array form of the same batch is unchanged by the map form's existence.
        let mut array_form = Vec::new();
        encode_batch(&batch, &mut array_form);
        assert_ne!(array_form, out);
        assert_eq!(
            array_form[11], 0x91,
            "AllBlocksCleared as a one-element array"
        );
    }
}
