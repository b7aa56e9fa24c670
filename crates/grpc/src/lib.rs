//! A gRPC method as kiln calls it: its descriptors, from `.proto` files compiled here
//! ([protox], no `protoc` at build or run time) or from a protoset (`protoc
//! --descriptor_set_out`), the method found by its URL path, the JSON message encoded with
//! protobuf's JSON mapping ([prost_reflect]) once before the run, and framed as a gRPC
//! message on the wire (a flag byte, a 4-byte length, the message).

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use prost::Message as _;
pub mod reflection;

pub use bytes::Bytes;
pub use prost_reflect::DescriptorPool;

use prost_reflect::{DynamicMessage, MessageDescriptor, MethodDescriptor};

#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    #[error("{0}")]
    Proto(String),
    #[error("cannot read the protoset {path}: {why}")]
    Protoset { path: String, why: String },
    #[error("{0}")]
    NoMethod(String),
    #[error("the message does not fit {message}: {why}")]
    Message { message: String, why: String },
    #[error("{0}")]
    Reflection(String),
}

/// A method found in the descriptors: where its calls go and what they carry.
#[derive(Clone, Debug)]
pub struct Method {
    /// The HTTP/2 path of its calls: `/package.Service/Method`.
    pub path: String,
    pub input: MessageDescriptor,
    pub output: MessageDescriptor,
    pub client_streaming: bool,
    pub server_streaming: bool,
}

/// Compiles `.proto` files with their imports found under `includes`; with no includes, each
/// file's own directory is one (as `protoc` takes the current directory). A file that does not
/// compile is said as `file:line:column: what`.
pub fn compile_protos(
    files: &[PathBuf],
    includes: &[PathBuf],
) -> Result<DescriptorPool, GrpcError> {
    let mut includes = includes.to_vec();
    if includes.is_empty() {
        for f in files {
            let dir = f.parent().filter(|d| !d.as_os_str().is_empty());
            let dir = dir.map_or_else(|| PathBuf::from("."), Path::to_path_buf);
            if !includes.contains(&dir) {
                includes.push(dir);
            }
        }
    }
    let mut compiler = protox::Compiler::new(&includes).map_err(|e| proto_error(&e))?;
    compiler.include_imports(true).include_source_info(false);
    for f in files {
        compiler.open_file(f).map_err(|e| proto_error(&e))?;
    }
    Ok(compiler.descriptor_pool())
}

/// A protobuf compiler's error with where it is: `file:line:column: what` when it points into
/// a file.
fn proto_error(e: &protox::Error) -> GrpcError {
    use miette::Diagnostic as _;
    let what = e.to_string();
    let place = e.file().and_then(|file| {
        let offset = e.labels()?.next()?.offset();
        let text = e.source_code()?.read_span(&(offset, 0).into(), 0, 0).ok()?;
        Some(format!("{file}:{}:{}", text.line() + 1, text.column() + 1))
    });
    GrpcError::Proto(match place {
        Some(place) => format!("{place}: {what}"),
        None => what,
    })
}

/// Descriptors from a protoset: a `FileDescriptorSet` as `protoc --descriptor_set_out
/// --include_imports` writes it.
pub fn read_protoset(path: &Path) -> Result<DescriptorPool, GrpcError> {
    let bad = |why: String| GrpcError::Protoset {
        path: path.display().to_string(),
        why,
    };
    let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    DescriptorPool::decode(bytes.as_slice()).map_err(|e| bad(e.to_string()))
}

/// The method a URL's path names (`/package.Service/Method`; `package.Service.Method` is
/// taken too). One that is not there is said with the services and methods that are.
pub fn find_method(pool: &DescriptorPool, path: &str) -> Result<Method, GrpcError> {
    let (service, method) = split_method(path).ok_or_else(|| {
        GrpcError::NoMethod(format!(
            "'{path}' names no method: write grpc://host:port/package.Service/Method ({})",
            known_methods(pool)
        ))
    })?;
    let Some(found) = pool.get_service_by_name(service) else {
        return Err(GrpcError::NoMethod(format!(
            "no service {service} in the descriptors ({})",
            known_methods(pool)
        )));
    };
    let wanted = found.methods().find(|m| m.name() == method);
    match wanted {
        Some(m) => Ok(method_of(&m)),
        None => {
            let has: Vec<String> = found.methods().map(|m| m.name().to_string()).collect();
            Err(GrpcError::NoMethod(format!(
                "no method {method} in {service}: it has {}",
                if has.is_empty() {
                    "none".to_string()
                } else {
                    has.join(", ")
                }
            )))
        }
    }
}

/// A URL path's service and method (`/package.Service/Method` or `package.Service.Method`).
pub fn split_method(path: &str) -> Option<(&str, &str)> {
    let name = path.trim_start_matches('/');
    name.rsplit_once('/').or_else(|| name.rsplit_once('.'))
}

fn method_of(m: &MethodDescriptor) -> Method {
    Method {
        path: format!("/{}/{}", m.parent_service().full_name(), m.name()),
        input: m.input(),
        output: m.output(),
        client_streaming: m.is_client_streaming(),
        server_streaming: m.is_server_streaming(),
    }
}

/// "they have: a.B/C, a.B/D" (at most twenty), or "they have no services".
fn known_methods(pool: &DescriptorPool) -> String {
    let all: Vec<String> = pool
        .services()
        .flat_map(|s| {
            let service = s.full_name().to_string();
            s.methods()
                .map(move |m| format!("{service}/{}", m.name()))
                .collect::<Vec<_>>()
        })
        .collect();
    match all.len() {
        0 => "they have no services".into(),
        n if n > 20 => format!("they have {n}: {}, …", all[..20].join(", ")),
        _ => format!("they have: {}", all.join(", ")),
    }
}

/// What one call sends: its framed messages, one after another in one body, and how many.
#[derive(Clone, Debug)]
pub struct Call {
    pub body: Bytes,
    pub messages: u32,
}

/// The most messages one call of a client stream sends.
pub const MAX_STREAM_MESSAGES: usize = 100_000;

/// The messages a call sends: `text` (protobuf's JSON mapping) encoded for `method`'s input,
/// and framed. A unary or server-streaming method takes one message (`{}` when `text` is
/// empty); a client-streaming or bidirectional one takes a sequence: JSON Lines (one message a
/// line, as `-b @messages.jsonl`) or a JSON array of messages (as ghz takes them). A field the
/// message has not is an error that names it, and the message's place in a sequence.
pub fn request_body(method: &Method, text: &str) -> Result<Call, GrpcError> {
    if !method.client_streaming {
        let message = encode_json(&method.input, text)?;
        return Ok(Call {
            body: frame(&message),
            messages: 1,
        });
    }
    let messages = stream_messages(text).map_err(|why| GrpcError::Message {
        message: method.input.full_name().to_string(),
        why,
    })?;
    let mut body = BytesMut::new();
    for (i, value) in messages.iter().enumerate() {
        let encoded = encode_value(&method.input, value).map_err(|e| match e {
            GrpcError::Message { message, why } => GrpcError::Message {
                message,
                why: format!("message {} of {}: {why}", i + 1, messages.len()),
            },
            other => other,
        })?;
        body.extend_from_slice(&frame(&encoded));
    }
    Ok(Call {
        body: body.freeze(),
        messages: messages.len() as u32,
    })
}

/// A client stream's messages as JSON values: whitespace-separated values (JSON Lines), or
/// one array of them.
fn stream_messages(text: &str) -> Result<Vec<serde_json::Value>, String> {
    let mut values = Vec::new();
    for (i, value) in serde_json::Deserializer::from_str(text)
        .into_iter::<serde_json::Value>()
        .enumerate()
    {
        let value = value.map_err(|e| format!("message {}: {e}", i + 1))?;
        if values.len() == MAX_STREAM_MESSAGES {
            return Err(format!(
                "more than {MAX_STREAM_MESSAGES} messages for one call"
            ));
        }
        values.push(value);
    }
    if let [serde_json::Value::Array(_)] = values.as_slice() {
        let Some(serde_json::Value::Array(list)) = values.pop() else {
            unreachable!("matched an array above");
        };
        if list.len() > MAX_STREAM_MESSAGES {
            return Err(format!(
                "more than {MAX_STREAM_MESSAGES} messages for one call"
            ));
        }
        values = list;
    }
    if values.is_empty() {
        return Err(
            "a client stream needs at least one message (-b, one JSON message a line)".into(),
        );
    }
    Ok(values)
}

fn encode_value(
    message: &MessageDescriptor,
    value: &serde_json::Value,
) -> Result<Vec<u8>, GrpcError> {
    let decoded =
        DynamicMessage::deserialize(message.clone(), value).map_err(|e| GrpcError::Message {
            message: message.full_name().to_string(),
            why: e.to_string(),
        })?;
    Ok(decoded.encode_to_vec())
}

/// `json` as the protobuf encoding of `message`.
pub fn encode_json(message: &MessageDescriptor, json: &str) -> Result<Vec<u8>, GrpcError> {
    let json = if json.trim().is_empty() { "{}" } else { json };
    let mut de = serde_json::Deserializer::from_str(json);
    let decoded = DynamicMessage::deserialize(message.clone(), &mut de)
        .and_then(|m| de.end().map(|()| m))
        .map_err(|e| GrpcError::Message {
            message: message.full_name().to_string(),
            why: e.to_string(),
        })?;
    Ok(decoded.encode_to_vec())
}

/// One message as gRPC frames it on the wire: not compressed (0), its length (big-endian u32),
/// the message.
pub fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.freeze()
}

/// The `grpc-timeout` header for a call's deadline: the fewest digits (at most eight, as the
/// protocol allows) in the finest unit that holds it.
pub fn timeout_header(deadline: Duration) -> String {
    let ns = deadline.as_nanos();
    for (unit, per) in [
        ("n", 1u128),
        ("u", 1_000),
        ("m", 1_000_000),
        ("S", 1_000_000_000),
    ] {
        let n = ns.div_ceil(per);
        if n < 100_000_000 {
            return format!("{n}{unit}");
        }
    }
    format!("{}M", ns.div_ceil(60_000_000_000).min(99_999_999))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOP: &str = r#"
syntax = "proto3";
package shop.v1;

message OrderRequest {
  string id = 1;
  int32 lines = 2;
  repeated string tags = 3;
}
message Order { string id = 1; }

service Orders {
  rpc Get(OrderRequest) returns (Order);
  rpc Watch(OrderRequest) returns (stream Order);
  rpc Upload(stream OrderRequest) returns (Order);
}
"#;

    fn shop_pool() -> (tempfile::TempDir, DescriptorPool) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("shop.proto");
        std::fs::write(&file, SHOP).unwrap();
        let pool = compile_protos(&[file], &[]).unwrap();
        (dir, pool)
    }

    #[test]
    fn a_method_is_found_by_its_path_and_its_json_encoded_and_framed() {
        let (_dir, pool) = shop_pool();
        let method = find_method(&pool, "/shop.v1.Orders/Get").unwrap();
        assert_eq!(method.path, "/shop.v1.Orders/Get");
        assert_eq!(method.input.full_name(), "shop.v1.OrderRequest");
        let body =
            (request_body(&method, r#"{"id": "42", "lines": 8, "tags": ["a"]}"#).unwrap()).body;
        // field 1 (string "42"), field 2 (varint 8), field 3 (string "a"), by hand
        let message = [0x0a, 2, b'4', b'2', 0x10, 8, 0x1a, 1, b'a'];
        assert_eq!(&body[..5], &[0, 0, 0, 0, message.len() as u8]);
        assert_eq!(&body[5..], &message);
        // the dotted form names the same method; an empty body is the empty message
        assert_eq!(
            find_method(&pool, "shop.v1.Orders.Get").unwrap().path,
            method.path
        );
        assert_eq!(
            &request_body(&method, "").unwrap().body[..],
            &[0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn what_is_not_there_is_said_with_what_is() {
        let (_dir, pool) = shop_pool();
        let e = find_method(&pool, "/shop.v1.Orders/Put")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no method Put in shop.v1.Orders: it has Get, Watch, Upload"),
            "{e}"
        );
        let e = find_method(&pool, "/shop.v1.Carts/Get")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no service shop.v1.Carts"), "{e}");
        assert!(
            e.contains(
                "they have: shop.v1.Orders/Get, shop.v1.Orders/Watch, shop.v1.Orders/Upload"
            ),
            "{e}"
        );
        let method = find_method(&pool, "/shop.v1.Orders/Get").unwrap();
        let e = request_body(&method, r#"{"idd": "1"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("shop.v1.OrderRequest") && e.contains("idd"),
            "{e}"
        );
        let e = request_body(&method, r#"{"lines": "many"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("shop.v1.OrderRequest"), "{e}");
        // a unary method takes one message, not a stream of them
        assert!(request_body(&method, "{}\n{}").is_err());
        let upload = find_method(&pool, "/shop.v1.Orders/Upload").unwrap();
        let e = request_body(&upload, "{\"id\": \"1\"}\n{\"idd\": \"2\"}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("message 2 of 2") && e.contains("idd"), "{e}");
        assert!(request_body(&upload, "  ").is_err());
    }

    #[test]
    fn a_client_stream_sends_each_line_or_each_element_framed() {
        let (_dir, pool) = shop_pool();
        let upload = find_method(&pool, "/shop.v1.Orders/Upload").unwrap();
        assert!(upload.client_streaming && !upload.server_streaming);
        let lines = request_body(&upload, "{\"id\": \"1\"}\n\n{\"id\": \"2\"}\n{}\n").unwrap();
        assert_eq!(lines.messages, 3);
        let one = |id: &[u8]| {
            let mut m = vec![0u8, 0, 0, 0, 2 + id.len() as u8, 0x0a, id.len() as u8];
            m.extend_from_slice(id);
            m
        };
        let want: Vec<u8> = [one(b"1"), one(b"2"), vec![0, 0, 0, 0, 0]].concat();
        assert_eq!(&lines.body[..], &want[..]);
        let array = request_body(&upload, r#"[{"id": "1"}, {"id": "2"}, {}]"#).unwrap();
        assert_eq!((array.messages, &array.body[..]), (3, &want[..]));
        // a server stream and a unary call send one message
        let watch = find_method(&pool, "/shop.v1.Orders/Watch").unwrap();
        assert_eq!(request_body(&watch, r#"{"id": "1"}"#).unwrap().messages, 1);
    }

    #[test]
    fn a_proto_that_does_not_compile_is_said_at_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.proto");
        std::fs::write(
            &file,
            "syntax = \"proto3\";\n\nmessage A {\n  strin id = 1;\n}\n",
        )
        .unwrap();
        let e = compile_protos(&[file], &[]).unwrap_err().to_string();
        assert!(e.starts_with("bad.proto:4:"), "{e}");
        let missing = dir.path().join("none.proto");
        let e = compile_protos(&[missing], &[]).unwrap_err().to_string();
        assert!(e.contains("none.proto"), "{e}");
    }

    #[test]
    fn a_protoset_reads_as_the_files_it_was_made_from() {
        let (dir, pool) = shop_pool();
        let set = dir.path().join("shop.protoset");
        std::fs::write(&set, pool.encode_to_vec()).unwrap();
        let read = read_protoset(&set).unwrap();
        assert!(find_method(&read, "/shop.v1.Orders/Get").is_ok());
        std::fs::write(&set, b"\xff\xff not a descriptor set").unwrap();
        assert!(read_protoset(&set)
            .unwrap_err()
            .to_string()
            .contains("shop.protoset"));
    }

    #[test]
    fn deadlines_are_written_in_the_finest_unit_that_holds_them() {
        assert_eq!(timeout_header(Duration::from_millis(50)), "50000000n");
        assert_eq!(timeout_header(Duration::from_secs(5)), "5000000u");
        assert_eq!(timeout_header(Duration::from_secs(3600)), "3600000m");
        assert_eq!(timeout_header(Duration::from_secs(500_000)), "500000S");
    }

    proptest::proptest! {
        /// Any text as the message is an answer or an error, never a panic.
        #[test]
        fn any_json_is_encoded_or_refused(json in ".{0,200}") {
            let (_dir, pool) = shop_pool();
            let method = find_method(&pool, "/shop.v1.Orders/Get").unwrap();
            let _ = request_body(&method, &json);
            let upload = find_method(&pool, "/shop.v1.Orders/Upload").unwrap();
            let _ = request_body(&upload, &json);
        }
    }
}
