//! The Relax executable's bytes (`SaveToBinary` / `SaveToBytes`): a header, the function table,
//! (V2) memory scopes, the constant pool and the code words, read with every count checked
//! against what follows.
//!
//! The three ABI generations write one layout but tag the constant pool differently, and the
//! version string is "0.14" in all of them, so the container the bytes came from says which tags
//! to read (see [`Generation`]).

#![forbid(unsafe_code)]

use crate::dlpack::DLDataType;
use crate::error::{Error, Result};
use crate::object::ObjRef;
use crate::params;
use crate::stream::Reader;
use crate::tensor::NDArray;

/// The header magic up to TVM 0.22, and from 0.23 (which added the memory-scope section).
pub const MAGIC_V1: u64 = 0xD225_DE2F_4214_151D;
pub const MAGIC_V2: u64 = 0xD225_DE2F_4214_151E;
pub const VERSION: &str = "0.14";

/// Which ABI an artefact was built for: it decides the constant pool's tags (and, in the library
/// layer, the blob's symbol and the kernels' calling convention).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generation {
    /// TVM 0.16 to 0.20: the classic packed ABI; tags are an enum 0..=5.
    Classic,
    /// TVM 0.21: the in-tree ffi; tags are its type indices (shape 71, tensor 72).
    InTreeFfi,
    /// TVM 0.22 and later: tvm-ffi 0.1; tags are its type indices (shape 69, tensor 70).
    Ffi,
}

impl Generation {
    pub fn describe(self) -> &'static str {
        match self {
            Generation::Classic => "TVM 0.16-0.20 (classic ABI)",
            Generation::InTreeFfi => "TVM 0.21 (in-tree ffi)",
            Generation::Ffi => "TVM 0.22+ (tvm-ffi)",
        }
    }

    /// The TVM versions that write this generation.
    pub fn tvm_versions(self) -> &'static str {
        match self {
            Generation::Classic => "0.16-0.20",
            Generation::InTreeFfi => "0.21",
            Generation::Ffi => "0.22 or later",
        }
    }

    /// The constant kind a pool tag names in this generation.
    fn constant_kind(self, tag: i32) -> Option<ConstKind> {
        use ConstKind::*;
        match (self, tag) {
            (Generation::Classic, 0) => Some(Tensor),
            (Generation::Classic, 1) => Some(DataType),
            (Generation::Classic, 2) => Some(Shape),
            (Generation::Classic, 3) => Some(Str),
            (Generation::Classic, 4) => Some(Int),
            (Generation::Classic, 5) => Some(Float),
            (_, 1) => Some(Int),
            (_, 3) => Some(Float),
            (_, 5) => Some(DataType),
            (_, 65) => Some(Str),
            (Generation::InTreeFfi, 71) | (Generation::Ffi, 69) => Some(Shape),
            (Generation::InTreeFfi, 72) | (Generation::Ffi, 70) => Some(Tensor),
            _ => None,
        }
    }
}

#[derive(Clone, Copy)]
enum ConstKind {
    Tensor,
    DataType,
    Shape,
    Str,
    Int,
    Float,
}

/// A constant pool entry.
#[derive(Clone, Debug)]
pub enum Constant {
    Tensor(ObjRef<NDArray>),
    DataType(DLDataType),
    Shape(Vec<i64>),
    Str(String),
    Int(i64),
    Float(f64),
}

/// What a function-table entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FuncKind {
    /// A packed function: a kernel of the library, a builtin or a global.
    Packed,
    /// A Relax function interpreted from the code section.
    Bytecode,
    /// A Relax function compiled to TIR (`exec_mode="compiled"`).
    CompiledTir,
}

#[derive(Clone, Debug)]
pub struct FuncInfo {
    pub kind: FuncKind,
    pub name: String,
    pub start: i64,
    pub end: i64,
    pub num_args: i64,
    pub registers: i64,
    pub params: Vec<String>,
}

/// The executable as stored.
#[derive(Clone, Debug)]
pub struct Image {
    pub magic: u64,
    pub functions: Vec<FuncInfo>,
    /// (constant index, memory scope) pairs of V2 images.
    pub scopes: Vec<(i64, String)>,
    pub constants: Vec<Constant>,
    pub instr_offsets: Vec<i64>,
    pub words: Vec<i64>,
}

/// More than any real executable holds; a corrupt count is refused before it sizes anything.
const MAX_PARAMS: usize = 1 << 16;

fn i64s(r: &mut Reader<'_>) -> Result<Vec<i64>> {
    let n = r.count(8)?;
    (0..n).map(|_| r.i64()).collect()
}

fn func_info(r: &mut Reader<'_>) -> Result<FuncInfo> {
    let kind = match r.i32()? {
        0 => FuncKind::Packed,
        1 => FuncKind::Bytecode,
        2 => FuncKind::CompiledTir,
        k => return Err(r.error(format!("unknown function kind {k}"))),
    };
    let name = r.string()?.to_string();
    let (start, end, num_args, registers) = (r.i64()?, r.i64()?, r.i64()?, r.i64()?);
    let params: Vec<String> = r.strings()?.into_iter().map(str::to_string).collect();
    if params.len() > MAX_PARAMS {
        return Err(r.error(format!("function '{name}' names {} parameters", params.len())));
    }
    Ok(FuncInfo { kind, name, start, end, num_args, registers, params })
}

fn constant(r: &mut Reader<'_>, generation: Generation, i: usize) -> Result<Constant> {
    let tag = r.i32()?;
    let kind = generation.constant_kind(tag).ok_or_else(|| {
        r.error(format!("constant {i} has tag {tag}, which no {} executable writes", generation.describe()))
    })?;
    Ok(match kind {
        ConstKind::Tensor => Constant::Tensor(super::constants::tensor(&params::read_record(r)?)?),
        ConstKind::DataType => Constant::DataType(DLDataType::new(r.u8()?, r.u8()?, r.u16()?)),
        ConstKind::Shape => Constant::Shape(i64s(r)?),
        ConstKind::Str => {
            let n = r.count(1)?;
            let bytes = r.bytes(n)?;
            Constant::Str(String::from_utf8_lossy(bytes).into_owned())
        }
        ConstKind::Int => Constant::Int(r.i64()?),
        ConstKind::Float => Constant::Float(f64::from_bits(r.u64()?)),
    })
}

impl Image {
    /// Reads the bytes the executable saved (without the length prefix of the classic blob).
    pub fn read(bytes: &[u8], generation: Generation) -> Result<Image> {
        let mut r = Reader::new(bytes, "Relax executable");
        let magic = r.u64()?;
        if magic != MAGIC_V1 && magic != MAGIC_V2 {
            return Err(r.error(format!("not a Relax executable (magic {magic:#x})")));
        }
        let version = r.string()?;
        if version != VERSION {
            return Err(r.error(format!("bytecode version '{version}', this runtime reads '{VERSION}'")));
        }
        let n = r.count(8)?;
        let functions = (0..n).map(|_| func_info(&mut r)).collect::<Result<Vec<_>>>()?;
        let mut scopes = Vec::new();
        if magic == MAGIC_V2 {
            let n = r.count(16)?;
            for _ in 0..n {
                scopes.push((r.i64()?, r.string()?.to_string()));
            }
        }
        let n = r.count(4)?;
        let constants = (0..n)
            .map(|i| constant(&mut r, generation, i).map_err(|e| e.context(format!("constant {i}"))))
            .collect::<Result<Vec<_>>>()?;
        let instr_offsets = i64s(&mut r)?;
        let words = i64s(&mut r)?;
        if !r.is_at_end() {
            return Err(r.error(format!("{} bytes after the code section", r.remaining())));
        }
        Ok(Image { magic, functions, scopes, constants, instr_offsets, words })
    }
}

/// Whether `bytes` begin as a Relax executable does.
pub fn looks_like(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && matches!(u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")), MAGIC_V1 | MAGIC_V2)
}

impl Constant {
    pub fn describe(&self) -> String {
        match self {
            Constant::Tensor(t) => format!("tensor {} {:?}", t.dtype(), t.shape()),
            Constant::DataType(d) => format!("dtype {d}"),
            Constant::Shape(s) => format!("shape {s:?}"),
            Constant::Str(s) => format!("string {s:?}"),
            Constant::Int(i) => format!("int {i}"),
            Constant::Float(f) => format!("float {f}"),
        }
    }
}

/// Errors name the function they are about.
pub fn in_function(e: Error, f: &FuncInfo) -> Error {
    e.context(format!("function '{}'", f.name))
}
