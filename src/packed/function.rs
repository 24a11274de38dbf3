//! The PackedFunc object: a Rust closure, a host callback, or an operator exported by a compiled
//! library. Calling the two foreign kinds is the unsafe part of this file.

use super::args::Args;
use super::value::RetValue;
use crate::dlpack::{kTVMNullptr, PackedCFn, TVMBackendPackedCFunc, TVMPackedCFuncFinalizer, TVMValue};
use crate::error::{Error, Result};
use crate::last_error;
use crate::object::{AnyObject, ObjRef};
use std::ffi::c_void;

pub type NativeFn = dyn Fn(&Args<'_>) -> Result<RetValue> + Send + Sync;
pub type CellsFn = dyn Fn(&[crate::dlpack::TVMFFIAny]) -> Result<RetValue> + Send + Sync;

pub enum FuncImpl {
    Native(Box<NativeFn>),
    /// A host callback from `TVMFuncCreateFromCFunc`.
    Callback {
        func: PackedCFn,
        resource: *mut c_void,
        finalizer: TVMPackedCFuncFinalizer,
    },
    /// A function that takes tvm-ffi's cells (a TVM 0.21+ kernel, a function of libtvm_ffi's):
    /// a VM's arguments go to it as cells directly.
    Cells(Box<CellsFn>),
    /// An operator of a loaded library; `_owner`, never read, keeps the library loaded.
    Kernel {
        func: TVMBackendPackedCFunc,
        _owner: AnyObject,
    },
}

/// Upstream's `PackedFuncObj` layout: the call pointer comes first after the object header, where
/// C++ hosts' inline `PackedFunc::operator()` jumps through it (`cxx/packed.cc` implements it on
/// top of `TVMFuncCall`).
#[repr(C)]
pub struct PackedFunc {
    call: CxxCall,
    imp: FuncImpl,
    /// Whether a pointer this function returns may be trusted to address what its contract says
    /// (compiled code, C hosts, or Rust code that promised so with `unsafe`).
    trusted_pointers: bool,
}

crate::object::object_type!(PackedFunc, crate::object::type_index::PACKED_FUNC);

use crate::cxx_abi::tvmrt_cxx_call_packed;
pub use crate::cxx_abi::CxxArgs;

type CxxCall = unsafe extern "C" fn(*const c_void, CxxArgs, *mut c_void);

// SAFETY: callbacks and kernels are called from any thread by TVM's contract; the resource handle
// is the host's to make thread-safe, as in upstream.
unsafe impl Send for PackedFunc {}
// SAFETY: as above.
unsafe impl Sync for PackedFunc {}

// The call pointer at the header + 16 (upstream's `PackedFuncObj::call_`), where hosts jump.
const _: () = assert!(std::mem::offset_of!(PackedFunc, call) == 0);

impl Drop for PackedFunc {
    fn drop(&mut self) {
        if let FuncImpl::Callback { resource, finalizer: Some(fin), .. } = self.imp {
            // SAFETY: the host asked for this call, once, when the function is destroyed.
            unsafe { fin(resource) }
        }
    }
}

impl Args<'_> {
    /// Argument `i` as a function (an argument of a packed call, read here to keep `args` free of
    /// the function type).
    pub fn func(&self, i: usize) -> Result<ObjRef<PackedFunc>> {
        self.typed_object(i, "PackedFunc")
    }
}

impl PackedFunc {
    fn make(imp: FuncImpl, trusted_pointers: bool) -> ObjRef<PackedFunc> {
        ObjRef::new(PackedFunc { call: tvmrt_cxx_call_packed, imp, trusted_pointers })
    }

    pub fn native<F>(f: F) -> ObjRef<PackedFunc>
    where
        F: Fn(&Args<'_>) -> Result<RetValue> + Send + Sync + 'static,
    {
        PackedFunc::make(FuncImpl::Native(Box::new(f)), false)
    }

    /// Like [`PackedFunc::native`], for a function whose returned pointers the runtime may use as
    /// memory (as `_lookup_linked_param`'s are used as weights).
    ///
    /// # Safety
    /// Every `RetValue::Handle` the function returns must address memory that is what the
    /// function's contract says (for `_lookup_linked_param`: the slot's bytes, readable, unchanged
    /// and alive for as long as the module that provides the function).
    pub unsafe fn native_trusted<F>(f: F) -> ObjRef<PackedFunc>
    where
        F: Fn(&Args<'_>) -> Result<RetValue> + Send + Sync + 'static,
    {
        PackedFunc::make(FuncImpl::Native(Box::new(f)), true)
    }

    /// Whether pointers this function returns may be used as memory (see [`PackedFunc::native_trusted`]).
    pub fn trusted_pointers(&self) -> bool {
        self.trusted_pointers
    }

    pub fn from_callback(
        func: PackedCFn,
        resource: *mut c_void,
        finalizer: TVMPackedCFuncFinalizer,
    ) -> ObjRef<PackedFunc> {
        PackedFunc::make(FuncImpl::Callback { func, resource, finalizer }, true)
    }

    /// A function over tvm-ffi's cells (`f` reads them for the call; classic arguments are
    /// translated).
    pub fn over_cells<F>(f: F) -> ObjRef<PackedFunc>
    where
        F: Fn(&[crate::dlpack::TVMFFIAny]) -> Result<RetValue> + Send + Sync + 'static,
    {
        PackedFunc::make(FuncImpl::Cells(Box::new(f)), false)
    }

    /// Calls with a VM's arguments lent, each as the item `item` makes of it: as cells where the
    /// function takes them, else as classic arguments, on the stack either way. None (nothing
    /// called) when an argument is no item or there are many.
    #[inline]
    pub fn call_lent<T>(&self, args: &[T], item: impl Fn(&T) -> Option<super::Item<'_>>) -> Option<Result<RetValue>> {
        if let FuncImpl::Cells(f) = &self.imp {
            return super::cells::with_lent_cells(args, item, |cells| f(cells));
        }
        let mut items = [super::Item::Null; super::cells::SMALL];
        if args.len() > items.len() {
            return None;
        }
        for (slot, a) in items.iter_mut().zip(args) {
            *slot = item(a)?;
        }
        Some(super::with_items(&items[..args.len()], |a| self.call(a)))
    }

    pub fn from_kernel(func: TVMBackendPackedCFunc, owner: AnyObject) -> ObjRef<PackedFunc> {
        PackedFunc::make(FuncImpl::Kernel { func, _owner: owner }, true)
    }

    /// The raw operator, for callers that prepare argument arrays once and call it directly.
    pub fn kernel(&self) -> Option<TVMBackendPackedCFunc> {
        match self.imp {
            FuncImpl::Kernel { func, .. } => Some(func),
            _ => None,
        }
    }

    #[inline]
    pub fn call(&self, args: &Args<'_>) -> Result<RetValue> {
        match &self.imp {
            FuncImpl::Native(f) => f(args),
            FuncImpl::Cells(f) => super::cells::with_cells(args, |cells| f(cells)),
            FuncImpl::Callback { func, resource, .. } => {
                let mut ret = RetValue::None;
                // SAFETY: the arrays hold `len` valid values; `ret` outlives the call and is only
                // written through `TVMCFuncSetReturn`, which casts the handle back to `RetValue`.
                // The call goes through the C++ guard: a C++ host's callback may throw.
                let rc = unsafe {
                    crate::cxx_abi::tvmrt_cxx_guarded_callback(
                        *func,
                        args.raw_values().as_ptr().cast_mut(),
                        args.raw_codes().as_ptr().cast_mut(),
                        args.len() as i32,
                        (&mut ret as *mut RetValue).cast(),
                        *resource,
                    )
                };
                if rc != 0 {
                    if last_error::has_python() {
                        return Err(Error::python_pending());
                    }
                    return Err(Error::foreign(last_error::get()));
                }
                Ok(ret)
            }
            FuncImpl::Kernel { func, .. } => {
                let mut ret = TVMValue::NULL;
                let mut code = kTVMNullptr;
                // SAFETY: the operator contract: it reads `len` values, checks their codes itself.
                let rc = unsafe {
                    call_kernel(
                        *func,
                        args.raw_values().as_ptr().cast_mut(),
                        args.raw_codes().as_ptr().cast_mut(),
                        args.len(),
                        &mut ret,
                        &mut code,
                    )
                };
                if rc != 0 {
                    return Err(Error::foreign(last_error::get()));
                }
                // SAFETY: the operator hands over what it returned.
                unsafe { RetValue::from_owned_c(ret, code) }
            }
        }
    }
}

/// Calls an operator with prepared arrays. Returns its status code. The call goes through the C++
/// layer's guard: library code written in C++ (BYOC entries, `__init_` functions) may throw, and a
/// C++ exception reaching a Rust frame aborts the process; the guard returns -1 with its message.
///
/// # Safety
/// The arrays must hold `n` values valid for the operator.
#[inline]
pub unsafe fn call_kernel(
    func: TVMBackendPackedCFunc,
    values: *mut TVMValue,
    codes: *mut i32,
    n: usize,
    ret: &mut TVMValue,
    ret_code: &mut i32,
) -> i32 {
    // SAFETY: per the contract; the guard only calls `func` with these arguments.
    unsafe {
        crate::cxx_abi::tvmrt_cxx_guarded_kernel(func, values, codes, n as i32, ret, ret_code, std::ptr::null_mut())
    }
}
