//! The OpenCL 1.2 calls this runtime makes, resolved from the ICD loader (`libOpenCL.so.1`) at first
//! use, so the library loads and runs CPU models where OpenCL is absent.
//!
//! Hand-written rather than a bindings crate: 35 entry points, each checked where it is called
//! (the error names the call), and no build-time dependency on OpenCL headers or an SDK.

use crate::error::{Error, Result};
use std::ffi::{c_char, c_void};

pub type ClInt = i32;
pub type ClUint = u32;
pub type Handle = *mut c_void;
pub type PlatformId = Handle;
pub type DeviceId = Handle;
pub type Context = Handle;
pub type Queue = Handle;
pub type Mem = Handle;
pub type Program = Handle;
pub type Kernel = Handle;
pub type Event = Handle;

pub const CL_SUCCESS: ClInt = 0;
pub const CL_DEVICE_TYPE_CPU: u64 = 1 << 1;
pub const CL_DEVICE_TYPE_GPU: u64 = 1 << 2;
pub const CL_DEVICE_NOT_FOUND: ClInt = -1;
pub const CL_PLATFORM_NOT_FOUND_KHR: ClInt = -1001;

pub const CL_PLATFORM_NAME: ClUint = 0x0902;
pub const CL_DEVICE_MAX_COMPUTE_UNITS: ClUint = 0x1002;
pub const CL_DEVICE_MAX_WORK_GROUP_SIZE: ClUint = 0x1004;
pub const CL_DEVICE_MAX_WORK_ITEM_SIZES: ClUint = 0x1005;
pub const CL_DEVICE_MAX_CLOCK_FREQUENCY: ClUint = 0x100C;
pub const CL_DEVICE_MEM_BASE_ADDR_ALIGN: ClUint = 0x1019;
pub const CL_DEVICE_GLOBAL_MEM_CACHE_SIZE: ClUint = 0x101E;
pub const CL_DEVICE_GLOBAL_MEM_SIZE: ClUint = 0x101F;
pub const CL_DEVICE_LOCAL_MEM_SIZE: ClUint = 0x1023;
pub const CL_DEVICE_NAME: ClUint = 0x102B;
pub const CL_DRIVER_VERSION: ClUint = 0x102D;
pub const CL_DEVICE_VERSION: ClUint = 0x102F;
pub const CL_PROGRAM_BUILD_LOG: ClUint = 0x1183;
pub const CL_DEVICE_IMAGE_SUPPORT: ClUint = 0x1016;
pub const CL_DEVICE_IMAGE2D_MAX_WIDTH: ClUint = 0x1011;
pub const CL_DEVICE_IMAGE2D_MAX_HEIGHT: ClUint = 0x1012;

pub const CL_RGBA: ClUint = 0x10B5;
pub const CL_SIGNED_INT8: ClUint = 0x10D7;
pub const CL_SIGNED_INT16: ClUint = 0x10D8;
pub const CL_SIGNED_INT32: ClUint = 0x10D9;
pub const CL_UNSIGNED_INT8: ClUint = 0x10DA;
pub const CL_UNSIGNED_INT16: ClUint = 0x10DB;
pub const CL_UNSIGNED_INT32: ClUint = 0x10DC;
pub const CL_HALF_FLOAT: ClUint = 0x10DD;
pub const CL_FLOAT: ClUint = 0x10DE;
pub const CL_MEM_OBJECT_IMAGE2D: ClUint = 0x10F1;
pub const CL_IMAGE_ELEMENT_SIZE: ClUint = 0x1111;
pub const CL_IMAGE_WIDTH: ClUint = 0x1114;
pub const CL_IMAGE_HEIGHT: ClUint = 0x1115;

pub const CL_MEM_READ_WRITE: u64 = 1;
pub const CL_BUFFER_CREATE_TYPE_REGION: ClUint = 0x1220;
pub const CL_FALSE: ClUint = 0;

/// `cl_image_format`.
#[repr(C)]
pub struct ImageFormat {
    pub order: ClUint,
    pub data_type: ClUint,
}

/// `cl_image_desc` (OpenCL 1.2).
#[repr(C)]
pub struct ImageDesc {
    pub image_type: ClUint,
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub array_size: usize,
    pub row_pitch: usize,
    pub slice_pitch: usize,
    pub mip_levels: ClUint,
    pub samples: ClUint,
    pub buffer: Mem,
}

/// `cl_buffer_region`.
#[repr(C)]
pub struct BufferRegion {
    pub origin: usize,
    pub size: usize,
}

macro_rules! opencl_api {
    ($($name:ident: fn($($arg:ty),*) -> $ret:ty;)*) => {
        /// The entry points, resolved once from the loaded library.
        #[allow(non_snake_case)]
        pub struct Api {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> $ret,)*
            _lib: libloading::Library,
        }

        impl Api {
            fn resolve(lib: libloading::Library, path: &str) -> Result<Api> {
                Ok(Api {
                    $($name: {
                        // SAFETY: the symbol is the OpenCL 1.2 entry point of that name, whose C
                        // signature the field's type states; `_lib` keeps it loaded.
                        let sym = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(concat!(stringify!($name), "\0").as_bytes())
                        };
                        *sym.map_err(|e| Error::tvm(format!(
                            "OpenCL library {path} lacks {}: {e}", stringify!($name)
                        )))?
                    },)*
                    _lib: lib,
                })
            }
        }
    };
}

opencl_api! {
    clGetPlatformIDs: fn(ClUint, *mut PlatformId, *mut ClUint) -> ClInt;
    clGetPlatformInfo: fn(PlatformId, ClUint, usize, *mut c_void, *mut usize) -> ClInt;
    clGetDeviceIDs: fn(PlatformId, u64, ClUint, *mut DeviceId, *mut ClUint) -> ClInt;
    clGetDeviceInfo: fn(DeviceId, ClUint, usize, *mut c_void, *mut usize) -> ClInt;
    clCreateContext: fn(*const isize, ClUint, *const DeviceId, *const c_void, *mut c_void, *mut ClInt) -> Context;
    clReleaseContext: fn(Context) -> ClInt;
    clCreateCommandQueue: fn(Context, DeviceId, u64, *mut ClInt) -> Queue;
    clReleaseCommandQueue: fn(Queue) -> ClInt;
    clFinish: fn(Queue) -> ClInt;
    clFlush: fn(Queue) -> ClInt;
    clCreateBuffer: fn(Context, u64, usize, *mut c_void, *mut ClInt) -> Mem;
    clCreateSubBuffer: fn(Mem, u64, ClUint, *const c_void, *mut ClInt) -> Mem;
    clReleaseMemObject: fn(Mem) -> ClInt;
    clEnqueueWriteBuffer: fn(Queue, Mem, ClUint, usize, usize, *const c_void, ClUint, *const Event, *mut Event) -> ClInt;
    clEnqueueReadBuffer: fn(Queue, Mem, ClUint, usize, usize, *mut c_void, ClUint, *const Event, *mut Event) -> ClInt;
    clEnqueueCopyBuffer: fn(Queue, Mem, Mem, usize, usize, usize, ClUint, *const Event, *mut Event) -> ClInt;
    clEnqueueFillBuffer: fn(Queue, Mem, *const c_void, usize, usize, usize, ClUint, *const Event, *mut Event) -> ClInt;
    clCreateImage: fn(Context, u64, *const ImageFormat, *const ImageDesc, *mut c_void, *mut ClInt) -> Mem;
    clGetImageInfo: fn(Mem, ClUint, usize, *mut c_void, *mut usize) -> ClInt;
    clEnqueueReadImage: fn(Queue, Mem, ClUint, *const usize, *const usize, usize, usize, *mut c_void, ClUint, *const Event, *mut Event) -> ClInt;
    clEnqueueWriteImage: fn(Queue, Mem, ClUint, *const usize, *const usize, usize, usize, *const c_void, ClUint, *const Event, *mut Event) -> ClInt;
    clEnqueueCopyImage: fn(Queue, Mem, Mem, *const usize, *const usize, *const usize, ClUint, *const Event, *mut Event) -> ClInt;
    clEnqueueCopyBufferToImage: fn(Queue, Mem, Mem, usize, *const usize, *const usize, ClUint, *const Event, *mut Event) -> ClInt;
    clEnqueueCopyImageToBuffer: fn(Queue, Mem, Mem, *const usize, *const usize, usize, ClUint, *const Event, *mut Event) -> ClInt;
    clEnqueueFillImage: fn(Queue, Mem, *const c_void, *const usize, *const usize, ClUint, *const Event, *mut Event) -> ClInt;
    clCreateProgramWithSource: fn(Context, ClUint, *const *const c_char, *const usize, *mut ClInt) -> Program;
    clCreateProgramWithBinary: fn(Context, ClUint, *const DeviceId, *const usize, *const *const u8, *mut ClInt, *mut ClInt) -> Program;
    clBuildProgram: fn(Program, ClUint, *const DeviceId, *const c_char, *const c_void, *mut c_void) -> ClInt;
    clGetProgramBuildInfo: fn(Program, DeviceId, ClUint, usize, *mut c_void, *mut usize) -> ClInt;
    clGetProgramInfo: fn(Program, ClUint, usize, *mut c_void, *mut usize) -> ClInt;
    clReleaseProgram: fn(Program) -> ClInt;
    clCreateKernel: fn(Program, *const c_char, *mut ClInt) -> Kernel;
    clReleaseKernel: fn(Kernel) -> ClInt;
    clSetKernelArg: fn(Kernel, ClUint, usize, *const c_void) -> ClInt;
    clEnqueueNDRangeKernel: fn(Queue, Kernel, ClUint, *const usize, *const usize, *const usize, ClUint, *const Event, *mut Event) -> ClInt;
}

/// Where the ICD loader is looked for, in order (the versioned name first: Debian's runtime package
/// installs only that one; the rest are upstream's list).
const LIBRARIES: &[&str] = &[
    "libOpenCL.so.1",
    "libOpenCL.so",
    "/usr/lib/libOpenCL.so",
    "/usr/local/lib/libOpenCL.so",
    "/usr/local/lib/libpocl.so",
    "/usr/lib64/libOpenCL.so",
    "/usr/lib32/libOpenCL.so",
];

impl Api {
    /// Opens the first OpenCL library found (`TVM_RT_OPENCL_LIBRARY` overrides the list).
    pub fn open() -> Result<Api> {
        let chosen = std::env::var("TVM_RT_OPENCL_LIBRARY").ok();
        let candidates: Vec<&str> = match &chosen {
            Some(p) => vec![p.as_str()],
            None => LIBRARIES.to_vec(),
        };
        let mut tried = Vec::new();
        for path in candidates {
            // SAFETY: loading an OpenCL ICD loader runs its initialisers, which is what using
            // OpenCL means; nothing of ours runs in between.
            match unsafe { libloading::Library::new(path) } {
                Ok(lib) => return Api::resolve(lib, path),
                Err(e) => tried.push(format!("{path}: {e}")),
            }
        }
        Err(Error::tvm(format!(
            "OpenCL is not available: no OpenCL library could be opened (install an ICD loader and a driver, e.g. \
             Debian's ocl-icd-libopencl1 and pocl-opencl-icd). Tried: {}",
            tried.join("; ")
        )))
    }
}

/// The name of an OpenCL status code.
pub fn status_name(code: ClInt) -> &'static str {
    match code {
        0 => "CL_SUCCESS",
        -1 => "CL_DEVICE_NOT_FOUND",
        -2 => "CL_DEVICE_NOT_AVAILABLE",
        -3 => "CL_COMPILER_NOT_AVAILABLE",
        -4 => "CL_MEM_OBJECT_ALLOCATION_FAILURE",
        -5 => "CL_OUT_OF_RESOURCES",
        -6 => "CL_OUT_OF_HOST_MEMORY",
        -11 => "CL_BUILD_PROGRAM_FAILURE",
        -10 => "CL_IMAGE_FORMAT_NOT_SUPPORTED",
        -13 => "CL_MISALIGNED_SUB_BUFFER_OFFSET",
        -30 => "CL_INVALID_VALUE",
        -32 => "CL_INVALID_PLATFORM",
        -33 => "CL_INVALID_DEVICE",
        -34 => "CL_INVALID_CONTEXT",
        -36 => "CL_INVALID_COMMAND_QUEUE",
        -38 => "CL_INVALID_MEM_OBJECT",
        -39 => "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR",
        -40 => "CL_INVALID_IMAGE_SIZE",
        -42 => "CL_INVALID_BINARY",
        -43 => "CL_INVALID_BUILD_OPTIONS",
        -44 => "CL_INVALID_PROGRAM",
        -45 => "CL_INVALID_PROGRAM_EXECUTABLE",
        -46 => "CL_INVALID_KERNEL_NAME",
        -48 => "CL_INVALID_KERNEL",
        -49 => "CL_INVALID_ARG_INDEX",
        -50 => "CL_INVALID_ARG_VALUE",
        -51 => "CL_INVALID_ARG_SIZE",
        -52 => "CL_INVALID_KERNEL_ARGS",
        -53 => "CL_INVALID_WORK_DIMENSION",
        -54 => "CL_INVALID_WORK_GROUP_SIZE",
        -55 => "CL_INVALID_WORK_ITEM_SIZE",
        -56 => "CL_INVALID_GLOBAL_OFFSET",
        -61 => "CL_INVALID_BUFFER_SIZE",
        -1001 => "CL_PLATFORM_NOT_FOUND_KHR",
        _ => "an unknown OpenCL status",
    }
}

/// `Ok` for CL_SUCCESS, else an error naming the call and the status.
pub fn check(code: ClInt, call: &str) -> Result<()> {
    if code == CL_SUCCESS {
        Ok(())
    } else {
        Err(Error::tvm(format!("OpenCL error in {call}: code={code}: {}", status_name(code))))
    }
}
