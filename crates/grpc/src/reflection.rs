//! A method's descriptors asked of the server: gRPC's reflection service
//! (`grpc.reflection.v1.ServerReflection`, and `v1alpha` for servers that have only that),
//! which answers with the `FileDescriptorProto`s that declare a symbol and, asked by name,
//! each file they import. The transport is the caller's ([`Transport`]): kiln sends these
//! calls over its own HTTP/2 connections, as the load's.
//!
//! The reflection messages are declared here with prost's derive rather than compiled from
//! reflection.proto: five small messages, whose `oneof`s read as the optional fields they are on
//! the wire.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use prost::Message as _;
use prost_reflect::DescriptorPool;
use prost_types::{FileDescriptorProto, FileDescriptorSet};

use crate::{frame, GrpcError};

/// The reflection service's bidirectional method, in each version servers run.
pub const REFLECTION_PATHS: [&str; 2] = [
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// A gRPC call's answer as the transport got it.
#[derive(Clone, Debug)]
pub struct Answer {
    /// `grpc-status` (or the code an HTTP error maps to).
    pub code: u8,
    /// The HTTP status and content type: a gRPC server answers `application/grpc`.
    pub http_status: u16,
    pub content_type: Option<String>,
    /// The response body: its framed messages.
    pub body: Vec<u8>,
}

impl Answer {
    /// What the answer was instead, if it is not a gRPC server's.
    fn not_grpc(&self) -> Option<String> {
        let content_type = self.content_type.as_deref().unwrap_or("");
        if content_type.starts_with("application/grpc") {
            return None;
        }
        let said = if content_type.is_empty() {
            "no content type".to_string()
        } else {
            format!(
                "content type {}",
                kiln_record::text::safe_text(content_type)
            )
        };
        Some(format!("HTTP {} with {said}", self.http_status))
    }
}

/// One gRPC call to `path` with `body` (framed messages, the stream then half-closed), its
/// whole answer read; an error that kept it from being answered is said as text.
pub type Transport<'a> = dyn FnMut(&str, Bytes) -> Result<Answer, String> + 'a;

#[derive(Clone, PartialEq, prost::Message)]
struct ReflectionRequest {
    #[prost(string, optional, tag = "3")]
    file_by_filename: Option<String>,
    #[prost(string, optional, tag = "4")]
    file_containing_symbol: Option<String>,
    #[prost(string, optional, tag = "7")]
    list_services: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ReflectionResponse {
    #[prost(message, optional, tag = "4")]
    file_descriptor_response: Option<FileDescriptorResponse>,
    #[prost(message, optional, tag = "6")]
    list_services_response: Option<ListServiceResponse>,
    #[prost(message, optional, tag = "7")]
    error_response: Option<ErrorResponse>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct FileDescriptorResponse {
    #[prost(bytes = "vec", repeated, tag = "1")]
    file_descriptor_proto: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ListServiceResponse {
    #[prost(message, repeated, tag = "1")]
    service: Vec<ServiceResponse>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ServiceResponse {
    #[prost(string, tag = "1")]
    name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ErrorResponse {
    #[prost(int32, tag = "1")]
    error_code: i32,
    #[prost(string, tag = "2")]
    error_message: String,
}

const UNIMPLEMENTED: u8 = 12;
/// Rounds of imports asked for, at most (each round asks for every file still missing).
const MAX_ROUNDS: usize = 64;

/// The descriptors of `service` (`package.Service`) and of every file it needs, from the
/// server's reflection service. A server without one, or without the service, is an error
/// that says so (with the services it lists).
pub fn reflect(service: &str, transport: &mut Transport<'_>) -> Result<DescriptorPool, GrpcError> {
    let refused = |why: String| GrpcError::Reflection(why);
    let ask = ReflectionRequest {
        file_containing_symbol: Some(service.to_string()),
        ..Default::default()
    };
    let (path, first) = first_answer(&ask, transport)?;
    let mut files: BTreeMap<String, FileDescriptorProto> = BTreeMap::new();
    let errors = take(&mut files, first)?;
    if files.is_empty() {
        let why = errors
            .first()
            .map_or_else(String::new, |e| format!(" ({})", e.error_message));
        let listed = list_services(path, transport)
            .map(|names| format!("; its reflection lists: {}", names.join(", ")))
            .unwrap_or_default();
        return Err(refused(format!(
            "the server's reflection has no service {service}{why}{listed}"
        )));
    }
    for _ in 0..MAX_ROUNDS {
        let missing: BTreeSet<String> = files
            .values()
            .flat_map(|f| f.dependency.iter().cloned())
            .filter(|d| !files.contains_key(d))
            .collect();
        if missing.is_empty() {
            break;
        }
        let asks: Vec<ReflectionRequest> = missing
            .iter()
            .map(|name| ReflectionRequest {
                file_by_filename: Some(name.clone()),
                ..Default::default()
            })
            .collect();
        let before = files.len();
        let errors = take(&mut files, call(path, &asks, transport)?)?;
        if files.len() == before {
            let why = errors
                .first()
                .map_or_else(String::new, |e| format!(": {}", e.error_message));
            return Err(refused(format!(
                "the server's reflection did not send {}{why}",
                missing.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let set = FileDescriptorSet {
        file: files.into_values().collect(),
    };
    DescriptorPool::from_file_descriptor_set(set).map_err(|e| {
        refused(format!(
            "its reflection's descriptors do not fit together: {e}"
        ))
    })
}

/// Keeps the files in `responses` (the first of each name), and returns their errors.
fn take(
    files: &mut BTreeMap<String, FileDescriptorProto>,
    responses: Vec<ReflectionResponse>,
) -> Result<Vec<ErrorResponse>, GrpcError> {
    let mut errors = Vec::new();
    for r in responses {
        if let Some(e) = r.error_response {
            errors.push(e);
        }
        let sent = r.file_descriptor_response.map(|f| f.file_descriptor_proto);
        for bytes in sent.unwrap_or_default() {
            let file = FileDescriptorProto::decode(bytes.as_slice()).map_err(|e| {
                GrpcError::Reflection(format!(
                    "its reflection sent a file that is not a descriptor: {e}"
                ))
            })?;
            files.entry(file.name().to_string()).or_insert(file);
        }
    }
    Ok(errors)
}

/// The first question, asked of v1 and then of v1alpha when the server has not v1.
fn first_answer(
    ask: &ReflectionRequest,
    transport: &mut Transport<'_>,
) -> Result<(&'static str, Vec<ReflectionResponse>), GrpcError> {
    for path in REFLECTION_PATHS {
        match call(path, std::slice::from_ref(ask), transport) {
            Err(GrpcError::Reflection(why)) if why.starts_with(UNIMPLEMENTED_SAID) => continue,
            answer => return answer.map(|responses| (path, responses)),
        }
    }
    Err(GrpcError::Reflection(
        "the server has no reflection service (v1 or v1alpha): give the method's descriptors \
         with --proto FILE.proto or --protoset FILE"
            .into(),
    ))
}

const UNIMPLEMENTED_SAID: &str = "UNIMPLEMENTED";

/// The services the reflection service lists, if it lists them.
fn list_services(path: &str, transport: &mut Transport<'_>) -> Option<Vec<String>> {
    let ask = ReflectionRequest {
        list_services: Some(String::new()),
        ..Default::default()
    };
    let answers = call(path, &[ask], transport).ok()?;
    let names: Vec<String> = answers
        .into_iter()
        .filter_map(|r| r.list_services_response)
        .flat_map(|l| l.service.into_iter().map(|s| s.name))
        .collect();
    (!names.is_empty()).then_some(names)
}

/// One stream to the reflection service: every question sent, then every answer read.
fn call(
    path: &str,
    asks: &[ReflectionRequest],
    transport: &mut Transport<'_>,
) -> Result<Vec<ReflectionResponse>, GrpcError> {
    let refused = |why: String| GrpcError::Reflection(why);
    let mut body = Vec::new();
    for ask in asks {
        body.extend_from_slice(&frame(&ask.encode_to_vec()));
    }
    let answer = transport(path, Bytes::from(body))
        .map_err(|why| refused(format!("its reflection service could not be asked: {why}")))?;
    if let Some(instead) = answer.not_grpc() {
        return Err(refused(format!(
            "it is not a gRPC server: it answered {instead}, not application/grpc"
        )));
    }
    if answer.code == UNIMPLEMENTED {
        return Err(refused(UNIMPLEMENTED_SAID.into()));
    }
    if answer.code != 0 {
        return Err(refused(format!(
            "its reflection service answered {}",
            kiln_record::grpc::grpc_code_name(answer.code)
        )));
    }
    let messages = unframe(&answer.body).map_err(refused)?;
    messages
        .into_iter()
        .map(|m| {
            ReflectionResponse::decode(m)
                .map_err(|e| refused(format!("its reflection's answer is not one: {e}")))
        })
        .collect()
}

/// A body's messages: each a flag byte (compressed ones refused: kiln asks for none), a
/// 4-byte big-endian length and the message.
pub fn unframe(mut body: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    while !body.is_empty() {
        if body.len() < 5 {
            return Err(format!(
                "a message's prefix is cut short ({} bytes)",
                body.len()
            ));
        }
        if body[0] != 0 {
            return Err("a message came compressed, which kiln did not ask for".into());
        }
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        let rest = &body[5..];
        if rest.len() < len {
            return Err(format!(
                "a message of {len} bytes is cut short at {}",
                rest.len()
            ));
        }
        out.push(&rest[..len]);
        body = &rest[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grpc_answer(code: u8, body: Vec<u8>) -> Answer {
        Answer {
            code,
            http_status: 200,
            content_type: Some("application/grpc".into()),
            body,
        }
    }

    /// Two files, one importing the other, compiled as a server would have them.
    fn server_pool() -> (tempfile::TempDir, DescriptorPool) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("money.proto"),
            "syntax = \"proto3\";\npackage shop.v1;\nmessage Money { int64 cents = 1; }\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("orders.proto"),
            "syntax = \"proto3\";\npackage shop.v1;\nimport \"money.proto\";\n\
             message Order { string id = 1; Money total = 2; }\n\
             service Orders { rpc Get(Order) returns (Order); }\n",
        )
        .unwrap();
        let pool = crate::compile_protos(&[dir.path().join("orders.proto")], &[]).unwrap();
        (dir, pool)
    }

    /// A reflection service over `pool` that speaks only `version`'s path, answering each
    /// question as gRPC's own servers do: one file per question, by symbol or by name.
    fn server<'a>(
        pool: &'a DescriptorPool,
        version: &'a str,
        asked: &'a mut Vec<String>,
    ) -> impl FnMut(&str, Bytes) -> Result<Answer, String> + 'a {
        move |path, body| {
            if path != version {
                return Ok(grpc_answer(UNIMPLEMENTED, Vec::new()));
            }
            let mut out = Vec::new();
            for m in unframe(&body).unwrap() {
                let ask = ReflectionRequest::decode(m).unwrap();
                let file = if let Some(symbol) = &ask.file_containing_symbol {
                    asked.push(format!("symbol {symbol}"));
                    pool.get_service_by_name(symbol).map(|s| s.parent_file())
                } else if let Some(name) = &ask.file_by_filename {
                    asked.push(format!("file {name}"));
                    pool.get_file_by_name(name)
                } else {
                    asked.push("list".into());
                    None
                };
                let response = match (file, ask.list_services.is_some()) {
                    (_, true) => ReflectionResponse {
                        list_services_response: Some(ListServiceResponse {
                            service: pool
                                .services()
                                .map(|s| ServiceResponse {
                                    name: s.full_name().into(),
                                })
                                .collect(),
                        }),
                        ..Default::default()
                    },
                    (Some(f), false) => ReflectionResponse {
                        file_descriptor_response: Some(FileDescriptorResponse {
                            file_descriptor_proto: vec![f.file_descriptor_proto().encode_to_vec()],
                        }),
                        ..Default::default()
                    },
                    (None, false) => ReflectionResponse {
                        error_response: Some(ErrorResponse {
                            error_code: 5,
                            error_message: "symbol not found".into(),
                        }),
                        ..Default::default()
                    },
                };
                out.extend_from_slice(&frame(&response.encode_to_vec()));
            }
            Ok(grpc_answer(0, out))
        }
    }

    #[test]
    fn a_service_and_its_imports_come_from_v1_or_v1alpha() {
        let (_dir, pool) = server_pool();
        for version in REFLECTION_PATHS {
            let mut asked = Vec::new();
            let mut transport = server(&pool, version, &mut asked);
            let got = reflect("shop.v1.Orders", &mut transport).unwrap();
            let method = crate::find_method(&got, "/shop.v1.Orders/Get").unwrap();
            // the imported message is whole: its field encodes
            let call = crate::request_body(&method, r#"{"id": "7", "total": {"cents": 5}}"#);
            assert_eq!(call.unwrap().messages, 1);
            drop(transport);
            assert_eq!(asked, ["symbol shop.v1.Orders", "file money.proto"]);
        }
    }

    #[test]
    fn what_the_server_lacks_is_said_with_what_it_has() {
        let (_dir, pool) = server_pool();
        let mut asked = Vec::new();
        let mut transport = server(&pool, REFLECTION_PATHS[0], &mut asked);
        let e = reflect("shop.v1.Carts", &mut transport)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no service shop.v1.Carts"), "{e}");
        assert!(e.contains("lists: shop.v1.Orders"), "{e}");
        let mut none = |_: &str, _: Bytes| Ok(grpc_answer(UNIMPLEMENTED, Vec::new()));
        let e = reflect("shop.v1.Orders", &mut none)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no reflection service") && e.contains("--proto"),
            "{e}"
        );
        let mut down = |_: &str, _: Bytes| Err("connection refused".to_string());
        let e = reflect("shop.v1.Orders", &mut down)
            .unwrap_err()
            .to_string();
        assert!(e.contains("connection refused"), "{e}");
    }

    proptest::proptest! {
        /// Any bytes as a reflection answer are read or refused, never a panic.
        #[test]
        fn any_answer_is_read_or_refused(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let mut transport = |_: &str, _: Bytes| Ok(grpc_answer(0, body.clone()));
            let _ = reflect("a.B", &mut transport);
        }
    }
}
