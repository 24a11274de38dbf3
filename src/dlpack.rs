//! The C structs and codes shared with compiled kernels and host programs (DLPack v0.7 and TVM's
//! packed-call ABI). Layouts are asserted at compile time: a wrong offset here corrupts every call.

use std::ffi::{c_char, c_void};

/// Device type codes (`DLDeviceType`). The CPU and OpenCL are served (see the device module).
pub type DLDeviceType = i32;
pub const kDLCPU: DLDeviceType = 1;
pub const kDLCUDA: DLDeviceType = 2;
pub const kDLCUDAHost: DLDeviceType = 3;
pub const kDLOpenCL: DLDeviceType = 4;
pub const kDLVulkan: DLDeviceType = 7;
pub const kDLMetal: DLDeviceType = 8;

/// `DLDataTypeCode` values.
pub const kDLInt: u8 = 0;
pub const kDLUInt: u8 = 1;
pub const kDLFloat: u8 = 2;
pub const kDLOpaqueHandle: u8 = 3;
pub const kDLBfloat: u8 = 4;
pub const kDLBool: u8 = 6;

/// A device: type and ordinal. 8 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDevice {
    pub device_type: DLDeviceType,
    pub device_id: i32,
}

/// cbindgen:ignore
impl DLDevice {
    pub const CPU: DLDevice = DLDevice { device_type: kDLCPU, device_id: 0 };
}

/// An element type: code, bits, lanes. 4 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

/// A tensor as kernels see it. `data + byte_offset` is the first element; `strides == NULL` means
/// compact row-major.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

/// A DLPack tensor with its owner's deleter.
#[repr(C)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// One packed-call value; which member is live is said by the type code beside it.
#[repr(C)]
#[derive(Clone, Copy)]
pub union TVMValue {
    pub v_int64: i64,
    pub v_float64: f64,
    pub v_handle: *mut c_void,
    pub v_str: *const c_char,
    pub v_type: DLDataType,
    pub v_device: DLDevice,
}

impl TVMValue {
    pub const NULL: TVMValue = TVMValue { v_int64: 0 };
}

/// A byte string passed by pointer (type code `kTVMBytes`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TVMByteArray {
    pub data: *const c_char,
    pub size: usize,
}

/// The environment of one parallel launch, as compiled kernels read it.
#[repr(C)]
#[derive(Debug)]
pub struct TVMParallelGroupEnv {
    pub sync_handle: *mut c_void,
    pub num_task: i32,
}

/// Packed-call argument type codes (`TVMArgTypeCode`).
pub type TVMArgTypeCode = i32;
pub const kTVMArgInt: TVMArgTypeCode = 0;
pub const kTVMArgFloat: TVMArgTypeCode = 2;
pub const kTVMOpaqueHandle: TVMArgTypeCode = 3;
pub const kTVMNullptr: TVMArgTypeCode = 4;
pub const kTVMDataType: TVMArgTypeCode = 5;
pub const kDLDevice: TVMArgTypeCode = 6;
pub const kTVMDLTensorHandle: TVMArgTypeCode = 7;
pub const kTVMObjectHandle: TVMArgTypeCode = 8;
pub const kTVMModuleHandle: TVMArgTypeCode = 9;
pub const kTVMPackedFuncHandle: TVMArgTypeCode = 10;
pub const kTVMStr: TVMArgTypeCode = 11;
pub const kTVMBytes: TVMArgTypeCode = 12;
pub const kTVMNDArrayHandle: TVMArgTypeCode = 13;
pub const kTVMObjectRValueRefArg: TVMArgTypeCode = 14;
pub const kTVMExtBegin: TVMArgTypeCode = 15;

/// The signature of every operator a compiled library exports.
pub type TVMBackendPackedCFunc = unsafe extern "C" fn(
    args: *mut TVMValue,
    type_codes: *mut i32,
    num_args: i32,
    out_ret_value: *mut TVMValue,
    out_ret_tcode: *mut i32,
    resource_handle: *mut c_void,
) -> i32;

/// A host callback exposed as a packed function (`TVMFuncCreateFromCFunc`).
pub type TVMPackedCFunc = Option<
    unsafe extern "C" fn(
        args: *mut TVMValue,
        type_codes: *mut i32,
        num_args: i32,
        ret: *mut c_void,
        resource_handle: *mut c_void,
    ) -> i32,
>;
pub type PackedCFn = unsafe extern "C" fn(
    args: *mut TVMValue,
    type_codes: *mut i32,
    num_args: i32,
    ret: *mut c_void,
    resource_handle: *mut c_void,
) -> i32;

/// Called once with the resource handle when a callback function is destroyed.
pub type TVMPackedCFuncFinalizer = Option<unsafe extern "C" fn(resource_handle: *mut c_void)>;

/// The body of a parallel loop handed to `TVMBackendParallelLaunch`.
pub type FTVMParallelLambda =
    Option<unsafe extern "C" fn(task_id: i32, penv: *mut TVMParallelGroupEnv, cdata: *mut c_void) -> i32>;
pub type ParallelLambdaFn =
    unsafe extern "C" fn(task_id: i32, penv: *mut TVMParallelGroupEnv, cdata: *mut c_void) -> i32;

const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<DLDevice>() == 8);
    assert!(size_of::<DLDataType>() == 4);
    assert!(size_of::<DLTensor>() == 48);
    assert!(offset_of!(DLTensor, device) == 8);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, strides) == 32);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(size_of::<TVMValue>() == 8 && align_of::<TVMValue>() == 8);
    assert!(size_of::<TVMByteArray>() == 16);
    assert!(size_of::<TVMParallelGroupEnv>() == 16);
    assert!(offset_of!(TVMParallelGroupEnv, num_task) == 8);
};

/// What a tensor of `shape` points its `shape` at: the dimensions, or for a 0-d tensor a real
/// zero (kernels may read `shape[0]` before checking the rank; an empty slice's address dangles).
/// Kernels never write a shape.
pub fn shape_ptr(shape: &[i64]) -> *mut i64 {
    static NO_DIMS: [i64; 1] = [0];
    if shape.is_empty() {
        NO_DIMS.as_ptr().cast_mut()
    } else {
        shape.as_ptr().cast_mut()
    }
}

/// `TVMFFIAny`, tvm-ffi's value cell (TVM 0.21 and later): a type index, 4 bytes of padding (or a
/// small string's length), 8 bytes of value.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct TVMFFIAny {
    pub type_index: i32,
    pub small_len: u32,
    pub value: u64,
}

/// `TVMFFISafeCallType`: how every tvm-ffi kernel is called.
pub type SafeCall = unsafe extern "C" fn(*mut c_void, *const TVMFFIAny, i32, *mut TVMFFIAny) -> std::ffi::c_int;
