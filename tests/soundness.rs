//! Regression tests of the memory errors a review reproduced (each crashed, read freed memory, or
//! let one executor's write reach another before the weights became immutable by type), through
//! the packed functions and C entry points a host uses.

mod common;
use common::*;
use std::ffi::CString;
use tvm_runtime::dlpack::DLDevice;
use tvm_runtime::executor::GraphExecutor;
use tvm_runtime::module::Module;
use tvm_runtime::object::ObjRef;
use tvm_runtime::packed::MapObj;
use tvm_runtime::tensor::NDArray;

/// Case 1: an entry of exactly `usize::MAX` bytes used to round to a 0-byte slot, and a `__copy`
/// then copied `usize::MAX` bytes (SIGSEGV from a 300-byte graph).
#[test]
fn an_entry_too_large_to_address_is_refused_at_create() {
    let json = r#"{"nodes":[{"op":"null","name":"x","inputs":[]},
      {"op":"tvm_op","name":"c","attrs":{"func_name":"__copy","num_inputs":"1","num_outputs":"1","flatten_data":"0"},"inputs":[[0,0,0]]}],
      "arg_nodes":[0],"node_row_ptr":[0,1,2],"heads":[[1,0,0]],
      "attrs":{"dltype":["list_str",["uint8","uint8"]],"storage_id":["list_int",[0,1]],
      "shape":["list_shape",[[3,6148914691236517205],[3,6148914691236517205]]]}}"#;
    let lib = Fixture::load("mlp_b1").load_lib();
    let e = GraphExecutor::create(json, lib, DLDevice::CPU).err().unwrap().to_c_message();
    assert!(e.contains("entry 0") && e.contains("larger than the 1 TiB a tensor may have"), "{e}");
}

/// Case 2: linked weights shared into another executor used to be kept alive only by the first
/// executor's plan; freeing it and the library left the second reading unmapped memory.
#[test]
fn linked_weights_outlive_the_executor_and_library_they_came_from() {
    let f = Fixture::load("mlp_unbound_b1");
    let (linked, _) = linked_library(&f);
    let a = GraphExecutor::create(&f.graph_json(), linked.clone(), DLDevice::CPU).unwrap();
    let b = f.executor_without_params(&f.load_lib());
    exec(&b).share_params(exec(&a), &f.params()).unwrap();
    assert!(exec(&b).memory_usage().weights_shared > 400_000);
    drop(a);
    drop(linked);
    f.set_inputs(&b);
    exec(&b).run().unwrap();
    f.check_outputs(&b, "linked weights after their executor and library are gone");
}

/// Case 3: a view from `get_input` taken before `share_params` used to alias the memory the
/// other executor then ran on; a write through it reached that executor.
#[test]
fn a_view_taken_before_sharing_never_reaches_the_executors_that_share() {
    let f = Fixture::load("mlp_unbound_b1");
    let lib = f.load_lib();
    let a = f.executor_from_create(&lib);
    let view = call(&a, "get_input", |b| {
        b.str("fc1_weight");
    })
    .unwrap()
    .into_object::<NDArray>()
    .unwrap();
    let b = f.executor_without_params(&lib);
    exec(&b).share_params(exec(&a), &f.params()).unwrap();
    let garbage = vec![0x7fu8; view.nbytes()];
    // SAFETY: no executor runs while the test writes.
    unsafe { view.copy_from_bytes(&garbage) }.unwrap();
    for (m, who) in [(&a, "the executor shared from"), (&b, "the executor sharing")] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, who);
    }
}

/// Case 3, the output side: an output that is a weight used to be handed out as a view of the
/// shared weight itself.
#[test]
fn an_output_that_is_a_shared_weight_is_handed_out_as_a_copy() {
    let f = Fixture::load("mlp_unbound_b1");
    let mut g: serde_json::Value = serde_json::from_str(&f.graph_json()).unwrap();
    let bias = g["nodes"].as_array().unwrap().iter().position(|n| n["name"] == "fc3_bias").unwrap();
    g["heads"].as_array_mut().unwrap().push(serde_json::json!([bias, 0, 0]));
    let json = g.to_string();
    let lib = f.load_lib();
    let a = f.executor_from_create(&lib);
    let b = GraphExecutor::create(&json, lib.clone(), DLDevice::CPU).unwrap();
    exec(&b).share_params(exec(&a), &f.params()).unwrap();
    let out = exec(&b).output(1).unwrap();
    let shared = exec(&a).entry_data(exec(&a).plan().input_entries[exec(&a).plan().input_index("fc3_bias").unwrap()]);
    assert_ne!(out.data_ptr().cast_const(), shared, "get_output handed out the shared weight");
    let want = f.params();
    let rec = tvm_runtime::params::parse(&want).unwrap().into_iter().find(|(n, _)| *n == "fc3_bias").unwrap().1;
    assert_eq!(out.to_vec(), rec.data, "the copy holds the weight");
    // SAFETY: no executor runs while the test writes.
    unsafe { out.copy_from_bytes(&vec![0u8; out.nbytes()]) }.unwrap();
    f.set_inputs(&a);
    exec(&a).run().unwrap();
    f.check_outputs(&a, "after a write to the other executor's output copy");
}

/// Case 4: `get_graph_params` used to return the very arrays every factory-made executor ran on.
#[test]
fn writing_the_factory_params_map_changes_no_executor() {
    let f = Fixture::load("mlp_b1");
    let lib = f.load_lib();
    let before = f.executor_from_factory(&lib);
    let get = Module::get_function(&lib, "get_graph_params", false).unwrap().unwrap();
    let map = get.call(&tvm_runtime::packed::ArgsBuilder::new().args()).unwrap().into_object::<MapObj>().unwrap();
    let mut written = 0;
    for name in ["p0", "p1", "p2"] {
        let a = map.get_str(name).unwrap().downcast_ref::<NDArray>().unwrap();
        // SAFETY: a copy nobody else reads.
        unsafe { a.copy_from_bytes(&vec![0xffu8; a.nbytes()]) }.unwrap();
        written += 1;
    }
    assert_eq!(written, 3);
    let after = f.executor_from_factory(&lib);
    for (m, who) in [(&before, "made before the write"), (&after, "made after the write")] {
        f.set_inputs(m);
        exec(m).run().unwrap();
        f.check_outputs(m, who);
    }
}

/// Case 7: a library cut short inside its segments used to kill the host with SIGBUS in dlopen.
#[test]
fn a_truncated_library_is_refused_before_dlopen() {
    let bytes = std::fs::read(Fixture::load("mlp_b1").lib_path()).unwrap();
    let dir = std::env::temp_dir().join(format!("tvmrt-soundness-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cut = dir.join("lib.so");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let path = CString::new(cut.to_str().unwrap()).unwrap();
    let format = CString::new("so").unwrap();
    let mut handle = std::ptr::null_mut();
    // SAFETY: valid C strings and an out-pointer, as a host passes them.
    let rc = unsafe { tvm_runtime::capi::module::TVMModLoadFromFile(path.as_ptr(), format.as_ptr(), &mut handle) };
    assert_eq!(rc, -1);
    // SAFETY: the thread's last error, a NUL-terminated string.
    let msg = unsafe { std::ffi::CStr::from_ptr(tvm_runtime::capi::error::TVMGetLastError()) }.to_string_lossy();
    assert!(msg.contains("the file is truncated"), "{msg}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Case 8: attributes that contradict the node's structure used to be accepted silently.
#[test]
fn a_node_whose_attributes_contradict_its_inputs_is_refused_by_name() {
    let f = Fixture::load("mlp_b1");
    let mut g: serde_json::Value = serde_json::from_str(&f.graph_json()).unwrap();
    let nodes = g["nodes"].as_array_mut().unwrap();
    let k = nodes.iter().position(|n| n["op"] == "tvm_op").unwrap();
    nodes[k]["attrs"]["num_inputs"] = "7".into();
    let name = nodes[k]["name"].as_str().unwrap().to_string();
    let e = GraphExecutor::create(&g.to_string(), f.load_lib(), DLDevice::CPU).err().unwrap().to_c_message();
    assert!(e.contains(&format!("node {k} ('{name}') says num_inputs 7 but lists")), "{e}");
}

/// A pointer becomes a weight only when the function handing it out vouches for it: a plain Rust
/// closure answering `_lookup_linked_param` could return any address from safe code.
#[test]
fn linked_params_from_an_untrusted_function_are_refused() {
    struct Untrusted(ObjRef<Module>);
    impl tvm_runtime::module::ModuleNode for Untrusted {
        fn type_key(&self) -> &str {
            "library"
        }
        fn get_function(
            &self,
            _: &ObjRef<Module>,
            name: &str,
        ) -> tvm_runtime::Result<Option<ObjRef<tvm_runtime::packed::PackedFunc>>> {
            if name == "_lookup_linked_param" {
                return Ok(Some(tvm_runtime::packed::PackedFunc::native(|_| {
                    Ok(tvm_runtime::packed::RetValue::Handle(16 as *mut std::ffi::c_void))
                })));
            }
            Module::get_function(&self.0, name, true)
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }
    let f = Fixture::load("mlp_unbound_b1");
    let lib = Module::new(Untrusted(f.load_lib()));
    let e = GraphExecutor::create(&f.graph_json(), lib, DLDevice::CPU).err().unwrap().to_c_message();
    assert!(e.contains("_lookup_linked_param must be compiled code"), "{e}");
}
