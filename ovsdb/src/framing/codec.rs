//! The splitter as `tokio_util` codecs, for the connection.

use bytes::{Bytes, BytesMut};
use serde_json::Value as Json;
use tokio_util::codec::{Decoder, Encoder};

use super::{FramingError, Splitter};

/// A `tokio_util` codec: bytes in, parsed JSON values out; JSON values in, bytes out.
#[derive(Debug, Default)]
pub struct JsonCodec {
    splitter: Splitter,
}

impl JsonCodec {
    pub fn new(max_message: usize) -> Self {
        JsonCodec {
            splitter: Splitter::new(max_message),
        }
    }
}

impl Decoder for JsonCodec {
    type Item = Json;
    type Error = FramingError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Json>, FramingError> {
        match self.splitter.split(buf)? {
            Some(msg) => Ok(Some(serde_json::from_slice(&msg)?)),
            None => Ok(None),
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Json>, FramingError> {
        match self.decode(buf)? {
            Some(m) => Ok(Some(m)),
            None if buf.iter().all(u8::is_ascii_whitespace) => Ok(None),
            None => Err(FramingError::Io(std::io::ErrorKind::UnexpectedEof.into())),
        }
    }
}

/// Like [`JsonCodec`], but yields each message's bytes unparsed (the session parses them
/// with [`crate::jsonrpc::parse_frame`]).
#[derive(Debug, Default)]
pub struct FrameCodec {
    splitter: Splitter,
}

impl FrameCodec {
    pub fn new(max_message: usize) -> Self {
        FrameCodec {
            splitter: Splitter::new(max_message),
        }
    }
}

impl Decoder for FrameCodec {
    type Item = Bytes;
    type Error = FramingError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, FramingError> {
        self.splitter.split(buf)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, FramingError> {
        match self.decode(buf)? {
            Some(m) => Ok(Some(m)),
            None if buf.iter().all(u8::is_ascii_whitespace) => Ok(None),
            None => Err(FramingError::Io(std::io::ErrorKind::UnexpectedEof.into())),
        }
    }
}

impl Encoder<Json> for JsonCodec {
    type Error = FramingError;

    fn encode(&mut self, item: Json, dst: &mut BytesMut) -> Result<(), FramingError> {
        use bytes::BufMut;
        serde_json::to_writer((&mut *dst).writer(), &item)?;
        Ok(())
    }
}

/// Already serialized messages go out as they are.
impl Encoder<Bytes> for JsonCodec {
    type Error = FramingError;

    fn encode(&mut self, item: Bytes, dst: &mut BytesMut) -> Result<(), FramingError> {
        dst.extend_from_slice(&item);
        Ok(())
    }
}
