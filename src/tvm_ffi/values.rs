//! Values across the boundary: a host's `Any` cells as this runtime's packed arguments, and this
//! runtime's results as cells libtvm_ffi and its hosts own; functions and modules both ways.
//!
//! - Ours to tvm-ffi: a module becomes the C++ object `cxx/ffi_module.cc` shapes as tvm-ffi's
//!   `ModuleObj`, holding one count of ours and calling back into this room; a function
//!   becomes a tvm-ffi function object (`TVMFFIFunctionCreate`) whose safe call converts the cells
//!   and calls ours.
//! - tvm-ffi's to ours: a module (the library module libtvm_ffi made for a `.so`) becomes a node
//!   whose functions are looked up through `ffi.ModuleGetFunction`; a function, a packed function
//!   that calls its safe call. Either way back returns the original, not a wrapper of a wrapper.

use super::api::{index, Api, Handle};
use super::cells::*;
use crate::dlpack::*;
use crate::error::{Error, Result};
use crate::module::{Module, ModuleNode};
use crate::object::{AnyObject, ObjRef};
use crate::packed::{ArgsBuilder, ArrayObj, PackedFunc, RetValue, ShapeTupleObj, StringObj};
use crate::tensor::raw::RawTensor;
use crate::tensor::NDArray;
use std::any::Any;
use std::ffi::{c_char, c_int, c_void, CString};

extern "C" {
    /// A new module object (one count) over one count of our module (`module`), with `kind` and
    /// two objects of its own (the import array, the lookup cache).
    fn tvmrt_ffi_module_new(module: *mut c_void, kind: *const c_char, imports: Handle, cache: Handle) -> Handle;
    /// Our module inside a module object of ours (borrowed), or null for anyone else's.
    fn tvmrt_ffi_module_core(handle: Handle) -> *mut c_void;
}

/// Appends a host's argument cell to a call's arguments (borrowed for the call).
///
/// # Safety
/// `c` must be a live cell, what its type index says, alive while `b`'s arguments are used.
pub unsafe fn push_arg(api: &'static Api, b: &mut ArgsBuilder, c: &TVMFFIAny) -> Result<()> {
    // SAFETY: each arm reads what the type index says the cell holds.
    unsafe {
        match c.type_index {
            index::NONE => b.null(),
            index::INT | index::BOOL => b.int(c.value as i64),
            index::FLOAT => b.float(f64::from_bits(c.value)),
            index::OPAQUE_PTR => b.handle(c.value as *mut c_void),
            index::DATA_TYPE => b.dtype(data_type(c.value)),
            index::DEVICE => b.device(device(c.value)),
            index::DL_TENSOR_PTR => b.dl_tensor(c.value as *mut DLTensor),
            index::SMALL_STR | index::STR | index::RAW_STR => b.str(utf8(text(c).ok_or_else(null_text)?)?),
            index::SMALL_BYTES | index::BYTES | index::BYTE_ARRAY_PTR => b.bytes(text(c).ok_or_else(null_text)?),
            index::TENSOR => match shared_tensor(api, c.value as Handle)? {
                Some(a) => b.object(a.into_any()),
                None => b.dl_tensor(cell_of::<DLTensor>(c.value as Handle) as *const DLTensor as *mut DLTensor),
            },
            _ => b.object(object_in(api, c)?),
        };
    }
    Ok(())
}

fn null_text() -> Error {
    Error::value("a null string")
}

/// A host's object cell as one of our objects (tensors that cannot be shared are copied).
///
/// # Safety
/// `c` must be a live cell, what its type index says.
pub unsafe fn object_in(api: &'static Api, c: &TVMFFIAny) -> Result<AnyObject> {
    let h = c.value as Handle;
    // SAFETY: each arm reads what the type index says the cell holds.
    unsafe {
        Ok(match c.type_index {
            index::SMALL_STR | index::STR => StringObj::new(utf8(text(c).expect("a string cell"))?).into_any(),
            index::SHAPE => {
                let cell = cell_of::<[usize; 2]>(h);
                let dims =
                    if cell[1] == 0 { &[][..] } else { std::slice::from_raw_parts(cell[0] as *const i64, cell[1]) };
                ShapeTupleObj::new(dims).into_any()
            }
            index::TENSOR => match shared_tensor(api, h)? {
                Some(a) => a.into_any(),
                None => {
                    let t = RawTensor::from_ptr(cell_of::<DLTensor>(h))?;
                    NDArray::copy_of(t, t.device())?.into_any()
                }
            },
            index::ARRAY => {
                let n = call_global(api, "ffi.ArraySize", &[*c])?;
                let n = expect_int(n, "ffi.ArraySize")?;
                let mut items = Vec::with_capacity(n as usize);
                for i in 0..n {
                    let item =
                        Cells(api, vec![call_global(api, "ffi.ArrayGetItem", &[*c, cell(index::INT, i as u64)])?]);
                    items.push(object_in(api, &item.1[0]).map_err(|e| e.context(format!("item {i}")))?);
                }
                ArrayObj::new(items).into_any()
            }
            index::FUNCTION => function_in(api, Owned::retain(api, h)).into_any(),
            index::MODULE => module_in(api, h)?.into_any(),
            index::NONE => return Err(Error::type_err("None inside a container is not supported by this runtime")),
            t => {
                return Err(Error::type_err(format!(
                    "a value of tvm-ffi type index {t} cannot be passed to this runtime (tensors, shapes, strings, \
                     arrays, functions and modules can)"
                )))
            }
        })
    }
}

/// A result cell of a tvm-ffi call as our value (the cell's count is consumed).
pub fn ret_in(api: &'static Api, c: TVMFFIAny) -> Result<RetValue> {
    // Plain values own nothing (a kernel's result is one): no cell to release.
    match c.type_index {
        index::NONE => return Ok(RetValue::None),
        index::INT | index::BOOL => return Ok(RetValue::Int(c.value as i64)),
        index::FLOAT => return Ok(RetValue::Float(f64::from_bits(c.value))),
        index::OPAQUE_PTR => return Ok(RetValue::Handle(c.value as *mut c_void)),
        index::DATA_TYPE => return Ok(RetValue::DataType(data_type(c.value))),
        index::DEVICE => return Ok(RetValue::Device(device(c.value))),
        _ => {}
    }
    let c = Cells(api, vec![c]);
    let v = &c.1[0];
    Ok(match v.type_index {
        // SAFETY: a live cell of the result.
        index::SMALL_STR | index::STR => RetValue::Str(utf8(unsafe { text(v) }.expect("a string"))?.to_string()),
        // SAFETY: as above.
        index::SMALL_BYTES | index::BYTES => RetValue::Bytes(unsafe { text(v) }.expect("bytes").to_vec()),
        // SAFETY: as above.
        _ => RetValue::Object(unsafe { object_in(api, v)? }),
    })
}

/// Our result as a cell the host owns.
pub fn ret_out(api: &'static Api, r: RetValue) -> Result<TVMFFIAny> {
    Ok(match r {
        RetValue::None => cell(index::NONE, 0),
        RetValue::Int(i) => cell(index::INT, i as u64),
        RetValue::Float(f) => cell(index::FLOAT, f.to_bits()),
        RetValue::Handle(p) => cell(index::OPAQUE_PTR, p as u64),
        RetValue::DataType(t) => {
            cell(index::DATA_TYPE, u64::from(t.code) | u64::from(t.bits) << 8 | u64::from(t.lanes) << 16)
        }
        RetValue::Device(d) => cell(index::DEVICE, (d.device_type as u32 as u64) | (d.device_id as u32 as u64) << 32),
        RetValue::Str(s) => string_out(api, s.as_bytes(), api.string_from_byte_array)?,
        RetValue::Bytes(b) => string_out(api, &b, api.bytes_from_byte_array)?,
        RetValue::Object(o) => object_out(api, o)?,
    })
}

/// Calls libtvm_ffi's constructor `name` (`ffi.Shape`, `ffi.Array`) with owned cells.
fn construct(api: &'static Api, name: &'static str, items: Cells<'_>) -> Result<TVMFFIAny> {
    call_global(api, name, &items.1)
}

fn object_out(api: &'static Api, o: AnyObject) -> Result<TVMFFIAny> {
    let o = match o.downcast::<NDArray>() {
        Ok(a) => return tensor_out(api, a),
        Err(o) => o,
    };
    if let Some(s) = o.payload::<ShapeTupleObj>() {
        let dims = s.dims().iter().map(|&d| cell(index::INT, d as u64)).collect();
        return construct(api, "ffi.Shape", Cells(api, dims));
    }
    if let Some(s) = o.payload::<StringObj>() {
        return string_out(api, s.as_str().as_bytes(), api.string_from_byte_array);
    }
    let o = match o.downcast::<ArrayObj>() {
        Ok(a) => {
            let mut items = Cells(api, Vec::with_capacity(a.items().len()));
            for (i, x) in a.items().iter().enumerate() {
                items.1.push(object_out(api, x.clone()).map_err(|e| e.context(format!("item {i}")))?);
            }
            return construct(api, "ffi.Array", items);
        }
        Err(o) => o,
    };
    let o = match o.downcast::<Module>() {
        Ok(m) => return Ok(cell(index::MODULE, module_out(api, &m)? as u64)),
        Err(o) => o,
    };
    match o.downcast::<PackedFunc>() {
        Ok(f) => Ok(cell(index::FUNCTION, function_out(api, f)? as u64)),
        Err(o) => Err(Error::type_err(format!("an object of type {} cannot be handed to tvm-ffi", o.type_key()))),
    }
}

/// A tvm-ffi module as a node of ours.
struct ForeignModule {
    handle: Owned,
    kind: String,
}

impl ModuleNode for ForeignModule {
    fn type_key(&self) -> &str {
        &self.kind
    }

    fn get_function(&self, _this: &ObjRef<Module>, name: &str) -> Result<Option<ObjRef<PackedFunc>>> {
        let api = super::api::require()?;
        let name = Cells(api, vec![ret_out(api, crate::packed::RetValue::Str(name.to_string()))?]);
        let args = [cell(index::MODULE, self.handle.as_ptr() as u64), name.1[0], cell(index::BOOL, 1)];
        let f = call_global(api, "ffi.ModuleGetFunction", &args)?;
        match f.type_index {
            index::NONE => Ok(None),
            // SAFETY: the function object's count, taken over.
            index::FUNCTION => Ok(Some(function_in(api, unsafe { Owned::from_raw(api, f.value as Handle) }))),
            t => {
                release(api, f);
                Err(Error::type_err(format!("ffi.ModuleGetFunction returned type index {t}")))
            }
        }
    }

    fn stands_for(&self) -> Option<usize> {
        Some(self.handle.as_ptr() as usize)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A module object from a host as our module (a new count of ours).
///
/// # Safety
/// `h` must be a live module object.
pub unsafe fn module_in(api: &'static Api, h: Handle) -> Result<ObjRef<Module>> {
    // SAFETY: per the contract.
    let core = unsafe { tvmrt_ffi_module_core(h) };
    if !core.is_null() {
        // SAFETY: the proxy holds a count of our module; this is another.
        let o = unsafe { AnyObject::retain_raw(core.cast()) }.ok_or_else(|| Error::value("a released module"))?;
        return o.downcast::<Module>().map_err(|_| Error::type_err("not a module"));
    }
    // SAFETY: per the contract.
    let handle = unsafe { Owned::retain(api, h) };
    let kind = call_global(api, "ffi.ModuleGetKind", &[cell(index::MODULE, h as u64)]).and_then(|c| ret_in(api, c))?;
    let kind = match kind {
        crate::packed::RetValue::Str(s) => s,
        _ => String::from("ffi.Module"),
    };
    Ok(Module::new(ForeignModule { handle, kind }))
}

/// Our module as a module object (a new count the caller owns).
pub fn module_out(api: &'static Api, m: &ObjRef<Module>) -> Result<Handle> {
    if let Some(f) = m.node::<ForeignModule>() {
        // SAFETY: a live object; the caller gets a count of its own.
        return Ok(unsafe { Owned::retain(api, f.handle.as_ptr()) }.into_raw());
    }
    let mut imports = Cells(api, Vec::new());
    for dep in m.imports() {
        imports.1.push(cell(index::MODULE, module_out(api, &dep)? as u64));
    }
    let imports = call_global(api, "ffi.Array", &imports.1)?;
    let cache = call_global(api, "ffi.Map", &[]);
    let cache = match cache {
        Ok(c) => c,
        Err(e) => {
            release(api, imports);
            return Err(e);
        }
    };
    let kind = CString::new(m.type_key().replace('\0', "")).unwrap_or_default();
    let ours = m.clone().into_any();
    // SAFETY: the proxy takes over one count of our module and of the two objects.
    Ok(unsafe {
        tvmrt_ffi_module_new(ours.into_raw().cast(), kind.as_ptr(), imports.value as Handle, cache.value as Handle)
    })
}

/// The safe call libtvm_ffi gives the function objects `TVMFFIFunctionCreate` makes, learnt from
/// one made here: such an object keeps its maker's context and safe call right after its cell
/// (words 5 and 6), which is how ours are known when they come back.
fn made_by_create(api: &'static Api) -> Option<usize> {
    static PROBE: once_cell::sync::OnceCell<Option<usize>> = once_cell::sync::OnceCell::new();
    *PROBE.get_or_init(|| {
        unsafe extern "C" fn keep(_: *mut c_void) {}
        let mut f: Handle = std::ptr::null_mut();
        // SAFETY: a function over a dummy context that nothing calls; released right away.
        unsafe {
            if (api.function_create)(8 as *mut c_void, call_ours, Some(keep), &mut f) != 0 || f.is_null() {
                return None;
            }
            let word = *f.cast::<usize>().add(3);
            (api.dec_ref)(f);
            Some(word)
        }
    })
}

/// A tvm-ffi function as ours: the original when it is one of ours coming back.
pub fn function_in(api: &'static Api, f: Owned) -> ObjRef<PackedFunc> {
    // SAFETY: a function object: header, then its cell (safe call, C++ call); one made by
    // `TVMFFIFunctionCreate` (its safe call says so) then holds the maker's context and call.
    unsafe {
        let words = f.as_ptr().cast::<usize>();
        if made_by_create(api) == Some(*words.add(3)) && *words.add(6) == call_ours as *const () as usize {
            if let Some(p) =
                AnyObject::retain_raw((*words.add(5) as *mut c_void).cast()).and_then(|o| o.downcast().ok())
            {
                return p;
            }
        }
    }
    PackedFunc::over_cells(move |cells| {
        // SAFETY: a function object we hold a count of; the cells point at the call's arguments.
        ret_in(api, unsafe { call(api, f.as_ptr(), cells)? })
    })
}

/// Our function as a tvm-ffi function object (a new count the caller owns).
pub fn function_out(api: &'static Api, f: ObjRef<PackedFunc>) -> Result<Handle> {
    let ctx = f.into_any();
    let ctx = ctx.into_raw();
    let mut out: Handle = std::ptr::null_mut();
    // SAFETY: the function object keeps our count in `self` until its deleter runs.
    let rc = unsafe { (api.function_create)(ctx.cast(), call_ours, Some(release_ours), &mut out) };
    if rc != 0 {
        // SAFETY: not taken on failure.
        unsafe { release_ours(ctx.cast()) };
        api.check(rc, "TVMFFIFunctionCreate")?;
    }
    Ok(out)
}

unsafe extern "C" fn release_ours(ctx: *mut c_void) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: the count `function_out` handed over.
        unsafe { drop(AnyObject::from_raw(ctx.cast())) };
    });
}

/// The safe call of our functions: the host's cells as arguments, our result as a cell it owns;
/// an error is raised in libtvm_ffi and the call returns -1.
unsafe extern "C" fn call_ours(ctx: *mut c_void, args: *const TVMFFIAny, n: i32, result: *mut TVMFFIAny) -> c_int {
    let Some(api) = super::api::api() else { return -1 };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<TVMFFIAny> {
        // SAFETY: `ctx` is the count `function_out` gave the object, alive while it is.
        let f = unsafe { AnyObject::retain_raw(ctx.cast()) }
            .and_then(|o| o.downcast::<PackedFunc>().ok())
            .ok_or_else(|| Error::value("a released function"))?;
        let cells = if n <= 0 || args.is_null() {
            &[][..]
        } else {
            // SAFETY: the caller's `n` cells.
            unsafe { std::slice::from_raw_parts(args, n as usize) }
        };
        ArgsBuilder::with_spare(|b| {
            for (i, c) in cells.iter().enumerate() {
                // SAFETY: live cells for the call.
                unsafe { push_arg(api, b, c) }.map_err(|e| e.context(format!("argument {i}")))?;
            }
            ret_out(api, f.call(&b.args())?)
        })
    }));
    match r {
        Ok(Ok(c)) => {
            // SAFETY: the caller's result cell.
            unsafe { *result = c };
            0
        }
        Ok(Err(e)) => {
            api.raise(&e);
            -1
        }
        Err(_) => {
            api.raise(&Error::tvm("a panic in the runtime (a bug: please report it)"));
            -1
        }
    }
}
