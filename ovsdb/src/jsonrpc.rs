//! JSON-RPC 1.0 messages as OVSDB uses them (RFC 7047 §4): requests, notifications (requests
//! with a null id) and responses.

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value as Json, json};

/// A message whose shape is not JSON-RPC.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("malformed JSON-RPC message ({reason}): {excerpt}")]
pub struct ProtocolError {
    pub reason: &'static str,
    pub excerpt: String,
}

impl ProtocolError {
    pub fn new(reason: &'static str, j: &Json) -> Self {
        ProtocolError {
            reason,
            excerpt: crate::value::ValueError::new("", j).json,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request {
        id: Json,
        method: String,
        params: Json,
    },
    Notification {
        method: String,
        params: Json,
    },
    Response {
        id: Json,
        result: Json,
        error: Json,
    },
}

impl Message {
    pub fn from_json(j: Json) -> Result<Message, ProtocolError> {
        let Json::Object(mut o) = j else {
            return Err(ProtocolError::new("not an object", &j));
        };
        let id = o.remove("id").unwrap_or(Json::Null);
        if let Some(m) = o.remove("method") {
            let Json::String(method) = m else {
                return Err(ProtocolError::new("method is not a string", &m));
            };
            let params = o.remove("params").unwrap_or(Json::Array(vec![]));
            if !params.is_array() {
                return Err(ProtocolError::new("params is not an array", &params));
            }
            return Ok(if id.is_null() {
                Message::Notification { method, params }
            } else {
                Message::Request { id, method, params }
            });
        }
        if o.contains_key("result") || o.contains_key("error") {
            let result = o.remove("result").unwrap_or(Json::Null);
            let error = o.remove("error").unwrap_or(Json::Null);
            return Ok(Message::Response { id, result, error });
        }
        Err(ProtocolError::new(
            "neither request nor response",
            &Json::Object(o),
        ))
    }

    pub fn to_json(&self) -> Json {
        match self {
            Message::Request { id, method, params } => {
                json!({"id": id, "method": method, "params": params})
            }
            Message::Notification { method, params } => {
                json!({"id": null, "method": method, "params": params})
            }
            Message::Response { id, result, error } => {
                let mut m = Map::new();
                m.insert("id".into(), id.clone());
                m.insert("result".into(), result.clone());
                m.insert("error".into(), error.clone());
                Json::Object(m)
            }
        }
    }
}

/// A message as the session reads it: like [`Message`], except that a notification's params
/// stay serialized (still checked to be a JSON array): a big `update3` is decoded by whoever
/// handles it, not by the reader, which meanwhile goes on to the transaction's reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Message(Message),
    Notification {
        method: String,
        params: Bytes,
    },
    /// A response whose `result` stays serialized (valid JSON, shared with the frame): a
    /// monitor's snapshot of tens of thousands of rows is decoded row by row by whoever asked,
    /// never held whole as a JSON tree.
    Response {
        id: Json,
        result: Bytes,
        error: Json,
    },
}

/// Why a frame is not a JSON-RPC message.
#[derive(Debug, thiserror::Error)]
pub enum IncomingError {
    #[error("message is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

/// The members of a message; a repeated key keeps its last value, as in a JSON tree.
#[derive(Default)]
struct Envelope<'a> {
    id: Option<Json>,
    method: Option<Json>,
    params: Option<&'a RawValue>,
    result: Option<&'a RawValue>,
    error: Option<Json>,
}

impl<'de> serde::Deserialize<'de> for Envelope<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Envelope<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON-RPC message object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Self::Value, A::Error> {
                let mut e = Envelope::default();
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "id" => e.id = Some(m.next_value()?),
                        "method" => e.method = Some(m.next_value()?),
                        "params" => e.params = Some(m.next_value()?),
                        "result" => e.result = Some(m.next_value()?),
                        "error" => e.error = Some(m.next_value()?),
                        // Parsed, not skipped: skipping would not check its strings' UTF-8.
                        _ => {
                            m.next_value::<Json>()?;
                        }
                    }
                }
                Ok(e)
            }
        }
        d.deserialize_map(V)
    }
}

/// Read one frame (a whole JSON object, as the splitter cuts them). Same checks and errors
/// as `serde_json::from_slice` and then [`Message::from_json`].
pub fn parse_frame(frame: &Bytes) -> Result<Incoming, IncomingError> {
    let env: Envelope = serde_json::from_slice(frame)?;
    let id = env.id.unwrap_or(Json::Null);
    if let Some(m) = env.method {
        let Json::String(method) = m else {
            return Err(ProtocolError::new("method is not a string", &m).into());
        };
        let params = match env.params {
            None => Bytes::from_static(b"[]"),
            Some(r) if !r.get().starts_with('[') => {
                let j: Json = serde_json::from_str(r.get())?;
                return Err(ProtocolError::new("params is not an array", &j).into());
            }
            Some(r) => sub_bytes(frame, r.get().as_bytes()),
        };
        if id.is_null() {
            return Ok(Incoming::Notification { method, params });
        }
        let params = serde_json::from_slice(&params)?;
        return Ok(Incoming::Message(Message::Request { id, method, params }));
    }
    if env.result.is_some() || env.error.is_some() {
        let result = match env.result {
            None => Bytes::from_static(b"null"),
            Some(r) => sub_bytes(frame, r.get().as_bytes()),
        };
        return Ok(Incoming::Response {
            id,
            result,
            error: env.error.unwrap_or(Json::Null),
        });
    }
    // Rare: read it again as a tree for the error's excerpt.
    let mut o: Map<String, Json> = serde_json::from_slice(frame)?;
    o.remove("id");
    Err(ProtocolError::new("neither request nor response", &Json::Object(o)).into())
}

/// `part` (a slice of `whole`) as a `Bytes` sharing `whole`'s memory.
fn sub_bytes(whole: &Bytes, part: &[u8]) -> Bytes {
    let start = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
    match start.checked_add(part.len()) {
        Some(end) if end <= whole.len() => whole.slice(start..end),
        _ => Bytes::copy_from_slice(part),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies() {
        let r = Message::from_json(json!({"id": 1, "method": "echo", "params": []})).unwrap();
        assert!(matches!(r, Message::Request { .. }));
        let n =
            Message::from_json(json!({"id": null, "method": "update2", "params": [1]})).unwrap();
        assert!(matches!(n, Message::Notification { .. }));
        let s = Message::from_json(json!({"id": 1, "result": null, "error": "x"})).unwrap();
        assert!(matches!(s, Message::Response { .. }));
        assert!(Message::from_json(json!([1])).is_err());
        assert!(Message::from_json(json!({"id": 1})).is_err());
        assert!(Message::from_json(json!({"method": 1})).is_err());
        assert_eq!(Message::from_json(r.to_json()).unwrap(), r);
    }

    /// `parse_frame` agrees with a JSON tree and `Message::from_json`, serialized notification
    /// params and response results aside.
    #[test]
    fn frames_like_trees() {
        let frames = [
            r#"{"id":1,"method":"echo","params":[1,{"a":"b"}]}"#,
            r#"{"id":null,"method":"update3","params":["m1","00000000-0000-0000-0000-000000000000",{"T":{}}]}"#,
            r#"{"method":"locked","params":["l"]}"#,
            r#"{"method":"x"}"#,
            r#"{"id":7,"result":[{"uuid":["uuid","x"]}],"error":null}"#,
            r#"{"id":7,"error":"e"}"#,
            r#"{"id":7,"result":1,"result":2,"x":{"y":[]}}"#,
            r#"{"id":1,"method":"a","method":2}"#,
            r#"{"id":1,"method":7}"#,
            r#"{"id":1,"method":"m","params":{"a":1}}"#,
            r#"{"id":1}"#,
            r#"{"id":1,"x":"y"}"#,
        ];
        for f in frames {
            let tree = Message::from_json(serde_json::from_str(f).unwrap());
            let ours = parse_frame(&Bytes::from(f));
            match (tree, ours) {
                (
                    Ok(Message::Notification { method, params }),
                    Ok(Incoming::Notification {
                        method: m2,
                        params: p2,
                    }),
                ) => {
                    assert_eq!(method, m2);
                    assert_eq!(params, serde_json::from_slice::<Json>(&p2).unwrap(), "{f}");
                }
                (
                    Ok(Message::Response { id, result, error }),
                    Ok(Incoming::Response {
                        id: i2,
                        result: r2,
                        error: e2,
                    }),
                ) => {
                    assert_eq!((id, error), (i2, e2), "{f}");
                    assert_eq!(result, serde_json::from_slice::<Json>(&r2).unwrap(), "{f}");
                }
                (Ok(a), Ok(Incoming::Message(b))) => assert_eq!(a, b, "{f}"),
                (Err(a), Err(IncomingError::Protocol(b))) => assert_eq!(a, b, "{f}"),
                (a, b) => panic!("{f}: {a:?} vs {b:?}"),
            }
        }
        for bad in [
            &b"{\"id\":1,"[..],
            b"{\"id\":\"\xff\"}",
            b"{\"x\":\"\xff\"}",
            b"{\"id\":1 2}",
        ] {
            assert!(serde_json::from_slice::<Json>(bad).is_err());
            assert!(matches!(
                parse_frame(&Bytes::from(bad)),
                Err(IncomingError::Json(_))
            ));
        }
    }
}
