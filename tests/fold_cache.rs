//! The fold cache hands an executor the weights another executor already derived only when they
//! are exactly what folding would compute for it: the same graph, each folded operator the same
//! kernel, every entry on the same device, and the very same weights. A hit is observable as
//! kernels not called; a wrong hit as wrong outputs.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tvm_runtime::dlpack::{DLDataType, DLDevice, DLTensor, TVMValue};
use tvm_runtime::executor::factory::Param;
use tvm_runtime::executor::plan::Plan;
use tvm_runtime::executor::GraphExecutor;
use tvm_runtime::module::{Module, ModuleNode};
use tvm_runtime::object::ObjRef;
use tvm_runtime::packed::PackedFunc;
use tvm_runtime::tensor::Weight;

static CALLS: AtomicUsize = AtomicUsize::new(0);

/// out[i] = k * in[i] over float32 [4] tensors: the two arguments are DLTensor handles.
unsafe fn scale(values: *mut TVMValue, k: f32) -> i32 {
    CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the executor calls with two tensor handles of four float32 each.
    unsafe {
        let input = (*values).v_handle.cast::<DLTensor>();
        let output = (*values.add(1)).v_handle.cast::<DLTensor>();
        let (a, b) = ((*input).data.cast::<f32>(), (*output).data.cast::<f32>());
        for i in 0..4 {
            *b.add(i) = k * *a.add(i);
        }
    }
    0
}

unsafe extern "C" fn times2(
    v: *mut TVMValue,
    _: *mut i32,
    _: i32,
    _: *mut TVMValue,
    _: *mut i32,
    _: *mut c_void,
) -> i32 {
    // SAFETY: as `scale`.
    unsafe { scale(v, 2.0) }
}

unsafe extern "C" fn times3(
    v: *mut TVMValue,
    _: *mut i32,
    _: i32,
    _: *mut TVMValue,
    _: *mut i32,
    _: *mut c_void,
) -> i32 {
    // SAFETY: as `scale`.
    unsafe { scale(v, 3.0) }
}

/// A library whose "scale" kernel is `f`.
struct Kernels(tvm_runtime::dlpack::TVMBackendPackedCFunc);

impl ModuleNode for Kernels {
    fn type_key(&self) -> &str {
        "library"
    }

    fn get_function(&self, this: &ObjRef<Module>, name: &str) -> tvm_runtime::Result<Option<ObjRef<PackedFunc>>> {
        Ok((name == "scale").then(|| PackedFunc::from_kernel(self.0, this.clone().into_any())))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// w (a weight) -> c = scale(w) (reads only the weight: folded) -> out = __copy(c).
const GRAPH: &str = r#"{"nodes":[{"op":"null","name":"w","inputs":[]},
 {"op":"tvm_op","name":"c","attrs":{"func_name":"scale","num_inputs":"1","num_outputs":"1","flatten_data":"0"},"inputs":[[0,0,0]]},
 {"op":"tvm_op","name":"out","attrs":{"func_name":"__copy","num_inputs":"1","num_outputs":"1","flatten_data":"0"},"inputs":[[1,0,0]]}],
 "arg_nodes":[0],"heads":[[2,0,0]],"node_row_ptr":[0,1,2,3],
 "attrs":{"dltype":["list_str",["float32","float32","float32"]],"shape":["list_shape",[[4],[4],[4]]],
 "storage_id":["list_int",[0,1,2]]}}"#;

fn plan(lib: &ObjRef<Module>) -> Arc<Plan> {
    tvm_runtime::init();
    Plan::new(GRAPH, lib.clone(), DLDevice::CPU).unwrap()
}

fn weight(v: f32) -> Param {
    let bytes: Vec<u8> = [v; 4].iter().flat_map(|x| x.to_le_bytes()).collect();
    Param {
        name: "w".into(),
        dtype: DLDataType::F32,
        shape: vec![4].into(),
        weight: Arc::new(Weight::copy_of(&bytes).unwrap()),
    }
}

/// An executor of `plan` bound to `w` (held by the caller too, so it folds), run once: its output.
fn run(plan: &Arc<Plan>, w: &Param) -> (GraphExecutor, Vec<f32>) {
    let ex = GraphExecutor::new(plan.clone()).unwrap();
    ex.bind_params(std::slice::from_ref(w)).unwrap();
    ex.run().unwrap();
    let out = ex.output(0).unwrap().to_vec();
    (ex, out.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
}

/// Kernel calls made by `f`.
fn calls(f: impl FnOnce()) -> usize {
    let before = CALLS.load(Ordering::SeqCst);
    f();
    CALLS.load(Ordering::SeqCst) - before
}

/// The tests share the call counter: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn executors_of_one_model_on_the_same_weights_derive_once() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lib = Module::new(Kernels(times2));
    let w = weight(1.5);
    // Two plans of one model (each `create` makes its own), the same weights: the second takes
    // the first's results, calling nothing.
    let (p1, p2) = (plan(&lib), plan(&lib));
    let mut keep = Vec::new();
    assert_eq!(calls(|| keep.push(run(&p1, &w))), 1);
    assert_eq!(keep[0].1, vec![3.0; 4]);
    assert_eq!(calls(|| keep.push(run(&p2, &w))), 0, "a hit: nothing derived again");
    assert_eq!(keep[1].1, vec![3.0; 4]);
    assert_eq!(calls(|| keep.push(run(&p1, &w))), 0, "the same plan: a hit too");
}

#[test]
fn other_kernels_or_other_weights_are_not_served_from_the_cache() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (lib2, lib3) = (Module::new(Kernels(times2)), Module::new(Kernels(times3)));
    let w = weight(2.0);
    let (_a, out) = run(&plan(&lib2), &w);
    assert_eq!(out, vec![4.0; 4]);
    // The same graph and weights, another kernel for the folded operator (another build).
    let (_b, out) = run(&plan(&lib3), &w);
    assert_eq!(out, vec![6.0; 4], "derived by its own kernel, not taken from the other build");
    // The same model, other weights (equal lengths).
    let other = weight(5.0);
    let n = calls(|| {
        let (_c, out) = run(&plan(&lib2), &other);
        assert_eq!(out, vec![10.0; 4], "derived from its own weights");
    });
    assert_eq!(n, 1);
    // What the first executor derived is still found (remembering others kept its entry).
    let n = calls(|| {
        let (_d, out) = run(&plan(&lib2), &w);
        assert_eq!(out, vec![4.0; 4]);
    });
    assert_eq!(n, 0, "a hit: the first executor is alive");
}
