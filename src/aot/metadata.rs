//! The metadata an AOT library describes itself with: `get_c_metadata` (a packed C function the
//! library exports) returns a `const struct TVMMetadata*` in the library's read-only data, version
//! 1: the entry function's inputs and outputs, its workspace pools and constant pools (USMP), the
//! model's name. Read once, checked, and copied into owned values here: the only place that reads
//! the library's structures.

use crate::dlpack::{kDLUInt, DLDataType, DLDevice};
use crate::error::{Error, Result};
use crate::object::ObjRef;
use crate::stream::Reader;
use crate::tensor::{Buffer, NDArray};
use std::ffi::{c_char, c_void, CStr};

#[repr(C)]
struct CMetadata {
    version: i64,
    inputs: *const CTensorInfo,
    num_inputs: i64,
    outputs: *const CTensorInfo,
    num_outputs: i64,
    workspace_pools: *const CTensorInfo,
    num_workspace_pools: i64,
    constant_pools: *const CConstantInfo,
    num_constant_pools: i64,
    mod_name: *const c_char,
}

#[repr(C)]
struct CTensorInfo {
    name: *const c_char,
    shape: *const i64,
    num_shape: i64,
    dtype: DLDataType,
}

#[repr(C)]
struct CConstantInfo {
    name_hint: *const c_char,
    byte_offset: i64,
    data_len: i64,
    /// A serialised NDArray (the params format's record).
    data_bytes: *const c_void,
}

/// A tensor the entry function takes: its name (sanitised by the compiler: every character that
/// is not alphanumeric became `_`), shape and dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Vec<i64>,
    pub dtype: DLDataType,
}

/// An empty array on `device` for each of `infos` (an executor's inputs or outputs).
pub fn empty_arrays(infos: &[TensorInfo], device: DLDevice) -> Result<Vec<ObjRef<NDArray>>> {
    infos.iter().map(|t| NDArray::empty(&t.shape, t.dtype, device)).collect()
}

/// A constant of a constant pool: where it goes in the pool, and its size.
pub struct Constant {
    pub name: String,
    pub byte_offset: usize,
    pub nbytes: usize,
}

pub struct Metadata {
    pub inputs: Vec<TensorInfo>,
    pub outputs: Vec<TensorInfo>,
    pub workspace_pools: Vec<TensorInfo>,
    pub constants: Vec<Constant>,
    /// The constants at their offsets in one byte array (as long as the furthest one's end), made
    /// as the metadata is read, from the library's own bytes, when the entry takes pools (USMP):
    /// upstream's rule. Read-only to the code.
    pub constant_pool: Option<ObjRef<NDArray>>,
    pub mod_name: String,
}

/// More than any model has: a count beyond it is a corrupt structure, not a model.
const MAX_ITEMS: i64 = 1 << 16;
const MAX_RANK: i64 = 64;
const MAX_CONSTANT_BYTES: i64 = 1 << 40;

impl Metadata {
    /// Reads the structure `get_c_metadata` returned.
    ///
    /// # Safety
    /// `ptr` is what the library's `get_c_metadata` returned, and the library stays loaded for the
    /// call: a `TVMMetadata` whose pointers point into the library's data.
    pub unsafe fn read(ptr: *const c_void) -> Result<Metadata> {
        if ptr.is_null() {
            return Err(Error::value("get_c_metadata returned null"));
        }
        // SAFETY: the caller's promise: a TVMMetadata.
        let m = unsafe { &*ptr.cast::<CMetadata>() };
        if m.version != 1 {
            return Err(Error::value(format!(
                "AOT metadata version {} (this runtime reads version 1, what TVM 0.9 to 0.19 write)",
                m.version
            )));
        }
        // SAFETY: the arrays and strings of the structure, per the caller's promise; counts and
        // pointers are checked before use.
        unsafe {
            let workspace_pools = tensor_infos(m.workspace_pools, m.num_workspace_pools, "workspace pools")?;
            let constants = constants(m.constant_pools, m.num_constant_pools)?;
            let constant_pool = if workspace_pools.is_empty() { None } else { Some(constant_pool(&constants)?) };
            Ok(Metadata {
                inputs: tensor_infos(m.inputs, m.num_inputs, "inputs")?,
                outputs: tensor_infos(m.outputs, m.num_outputs, "outputs")?,
                workspace_pools,
                constants: constants.into_iter().map(|(c, _)| c).collect(),
                constant_pool,
                mod_name: string(m.mod_name, "mod_name")?,
            })
        }
    }
}

/// The constants in one array, each at its offset, copied once from the library's bytes.
fn constant_pool(constants: &[(Constant, &[u8])]) -> Result<ObjRef<NDArray>> {
    let too_far = || Error::value("AOT metadata: a constant pool beyond the address space");
    let len = constants
        .iter()
        .try_fold(0usize, |end, (c, _)| c.byte_offset.checked_add(c.nbytes).map(|e| end.max(e)).ok_or_else(too_far))?;
    let block = std::sync::Arc::new(Buffer::zeroed_on(DLDevice::CPU, len)?);
    let pool =
        NDArray::view_of(&block, 0, &[i64::try_from(len).map_err(|_| too_far())?], DLDataType::new(kDLUInt, 8, 1))?;
    for (c, bytes) in constants {
        // SAFETY: a new host array of `len` bytes nobody else holds; each constant ends within
        // it (`len` is the furthest end), and its bytes are the library's, which cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), pool.data_ptr().add(c.byte_offset), bytes.len()) };
    }
    Ok(pool)
}

/// # Safety
/// `items` points at `n` structures (when `n` is in range and `items` is not null).
unsafe fn slice<'a, T>(items: *const T, n: i64, what: &str) -> Result<&'a [T]> {
    if !(0..=MAX_ITEMS).contains(&n) {
        return Err(Error::value(format!("AOT metadata: {n} {what}")));
    }
    if n == 0 {
        return Ok(&[]);
    }
    if items.is_null() {
        return Err(Error::value(format!("AOT metadata: {n} {what} at a null address")));
    }
    // SAFETY: the caller's promise, for a count checked above.
    Ok(unsafe { std::slice::from_raw_parts(items, n as usize) })
}

/// # Safety
/// `s` is null or a NUL-terminated string.
unsafe fn string(s: *const c_char, what: &str) -> Result<String> {
    if s.is_null() {
        return Err(Error::value(format!("AOT metadata: no {what}")));
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

/// # Safety
/// As [`slice`], each one's strings and shape per [`string`] and [`slice`].
unsafe fn tensor_infos(items: *const CTensorInfo, n: i64, what: &str) -> Result<Vec<TensorInfo>> {
    // SAFETY: the caller's promise.
    let items = unsafe { slice(items, n, what)? };
    items
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let what = format!("{what} {i}");
            if t.num_shape > MAX_RANK {
                return Err(Error::value(format!("AOT metadata: {what} has rank {}", t.num_shape)));
            }
            // SAFETY: the caller's promise for this structure's fields.
            let (name, shape) =
                unsafe { (string(t.name, &format!("name of {what}"))?, slice(t.shape, t.num_shape, &what)?) };
            if shape.iter().any(|&d| d < 0) || crate::dtype::num_elements(shape).is_err() || t.dtype.bits == 0 {
                return Err(Error::value(format!("AOT metadata: {what} ('{name}') is {} {shape:?}", t.dtype)));
            }
            Ok(TensorInfo { name, shape: shape.to_vec(), dtype: t.dtype })
        })
        .collect()
}

/// # Safety
/// As [`slice`]; each constant's `data_bytes` holds `data_len` bytes.
unsafe fn constants<'a>(items: *const CConstantInfo, n: i64) -> Result<Vec<(Constant, &'a [u8])>> {
    // SAFETY: the caller's promise.
    let items = unsafe { slice(items, n, "constant pools")? };
    items
        .iter()
        .enumerate()
        .map(|(i, c)| {
            // SAFETY: the caller's promise for this structure's fields.
            let name = unsafe { string(c.name_hint, &format!("name of constant {i}"))? };
            let byte_offset = usize::try_from(c.byte_offset)
                .map_err(|_| Error::value(format!("AOT metadata: constant '{name}' at offset {}", c.byte_offset)))?;
            if !(0..=MAX_CONSTANT_BYTES).contains(&c.data_len) || (c.data_len > 0 && c.data_bytes.is_null()) {
                return Err(Error::value(format!("AOT metadata: constant '{name}' of {} bytes", c.data_len)));
            }
            let data: &[u8] = if c.data_len == 0 {
                &[]
            } else {
                // SAFETY: as above: `data_len` bytes at `data_bytes` (non-null, length checked).
                unsafe { std::slice::from_raw_parts(c.data_bytes.cast::<u8>(), c.data_len as usize) }
            };
            let bytes = if data.is_empty() {
                &[][..]
            } else {
                let mut r = Reader::new(data, "AOT constant");
                let record = crate::params::read_record(&mut r)
                    .map_err(|e| e.context(format!("AOT metadata: constant '{name}'")))?;
                record.data
            };
            Ok((Constant { name, byte_offset, nbytes: bytes.len() }, bytes))
        })
        .collect()
}

/// The metadata of the AOT library `code` (the factory's import: the metadata module, whose import
/// is the library) describes itself with, through its `get_c_metadata`.
pub fn of_library(code: &ObjRef<crate::module::Module>) -> Result<Metadata> {
    use crate::module::Module;
    use crate::packed::{ArgsBuilder, RetValue};
    let f = Module::get_function(code, "get_c_metadata", true)?
        .ok_or_else(|| Error::attribute("the AOT artefact's library has no get_c_metadata"))?;
    match f.call(&ArgsBuilder::new().args())? {
        // SAFETY: what the library's get_c_metadata returned, read while `code` (which holds the
        // library) is alive.
        RetValue::Handle(p) => unsafe { Metadata::read(p) },
        other => Err(Error::type_err(format!("get_c_metadata returned {other:?}, not a handle"))),
    }
}
