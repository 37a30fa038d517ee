//! A bounds-checked little-endian cursor over GGUF bytes (spec: ggml `docs/gguf.md`):
//! scalars, strings, metadata values (nested arrays up to a depth limit) and tensor infos.
//! Every length or count is checked against the bytes that remain before it is used.

use tinynn::quant::GgmlType;

use super::error::{tensor_err, GgufError};
use super::tensor_info::{check_shape, TensorInfo, MAX_ARRAY_DEPTH, MAX_DIMS};
use super::value::{Value, ValueType};

/// A bounds-checked little-endian reader over the file bytes.
pub(crate) struct Cursor<'b> {
    pub(crate) buf: &'b [u8],
    pub(crate) pos: usize,
}

impl<'b> Cursor<'b> {
    pub(crate) fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    pub(crate) fn take(&mut self, n: u64, what: &str) -> Result<&'b [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                offset: self.pos as u64,
                need: n,
                what: what.to_string(),
                len: self.buf.len() as u64,
            });
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        Ok(s.try_into().expect("take returned N bytes"))
    }
    fn u8(&mut self, what: &str) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Fails unless `count` items of at least `min_size` bytes each fit in what remains.
    pub(crate) fn check_count(
        &self,
        what: &str,
        count: u64,
        min_size: u64,
    ) -> Result<(), GgufError> {
        let max = self.remaining() / min_size;
        if count > max {
            return Err(GgufError::CountTooLarge {
                what: what.to_string(),
                count,
                offset: self.pos as u64,
                remaining: self.remaining(),
                max,
            });
        }
        Ok(())
    }

    pub(crate) fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let n = self.u64(what)?;
        let at = self.pos as u64;
        let bytes = self.take(n, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(GgufError::BadUtf8 {
                what: what.to_string(),
                offset: at,
            }),
        }
    }

    pub(crate) fn value_type(&mut self, what: &str) -> Result<ValueType, GgufError> {
        let at = self.pos as u64;
        let id = self.u32(what)?;
        ValueType::from_id(id).ok_or_else(|| GgufError::BadValueType {
            what: what.to_string(),
            id,
            offset: at,
        })
    }

    pub(crate) fn value(
        &mut self,
        ty: ValueType,
        what: &str,
        depth: usize,
    ) -> Result<Value, GgufError> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.u8(what)?),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(what)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            ValueType::U32 => Value::U32(self.u32(what)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            ValueType::U64 => Value::U64(self.u64(what)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            ValueType::Bool => {
                let at = self.pos as u64;
                match self.u8(what)? {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    found => {
                        let what = what.to_string();
                        return Err(GgufError::BadBool {
                            what,
                            found,
                            offset: at,
                        });
                    }
                }
            }
            ValueType::String => Value::String(self.string(what)?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::TooDeep {
                        what: what.to_string(),
                        max: MAX_ARRAY_DEPTH,
                        offset: self.pos as u64,
                    });
                }
                let elem = self.value_type(what)?;
                let n = self.u64(what)?;
                self.check_count(&format!("array element ({what})"), n, elem.min_size())?;
                // Bounded by the file size above; capped further because a Value is larger
                // than the smallest element, and real data grows the Vec as it is parsed.
                let mut items = Vec::with_capacity((n as usize).min(1 << 16));
                for _ in 0..n {
                    items.push(self.value(elem, what, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }

    pub(crate) fn tensor_info(&mut self, i: u64, alignment: u64) -> Result<TensorInfo, GgufError> {
        let name = self.string(&format!("name of tensor {i}"))?;
        let what = format!("info of tensor '{name}'");
        let n_dims = self.u32(&what)?;
        if n_dims as usize > MAX_DIMS {
            return Err(tensor_err(
                &name,
                format!("{n_dims} dims: expected at most {MAX_DIMS}"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64(&what)?);
        }
        let id = self.u32(&what)?;
        let ty = GgmlType::from_id(id)
            .ok_or_else(|| tensor_err(&name, format!("unknown ggml type id {id}")))?;
        let offset = self.u64(&what)?;
        check_shape(&name, &dims, ty)?;
        if !offset.is_multiple_of(alignment) {
            let msg = format!("data offset {offset} not a multiple of alignment {alignment}");
            return Err(tensor_err(&name, msg));
        }
        Ok(TensorInfo {
            name,
            dims,
            ty,
            offset,
        })
    }
}
