//! JSON-RPC 1.0 messages as OVSDB uses them (RFC 7047 §4): requests, notifications (requests
//! with a null id) and responses.

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
}
