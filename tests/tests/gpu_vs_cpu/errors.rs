//! Errors a caller can act on: a modality call that runs out of device memory returns the
//! runtime's own `OutOfDeviceMemory` inside the modality error, so the caller can match it
//! and fall back (smaller chunks, or the CPU), instead of parsing a message.

use biogpu_tests::gpu_test;
use gpu_runtime::Device;
use ndarray::Array3;
use speckle_core::{ContrastParams, RawStack, Window, contrast};

gpu_test! {
    fn a_modality_call_out_of_device_memory_can_fall_back_to_the_cpu(device) {
        let stack = RawStack::U16(Array3::from_shape_fn((2, 64, 80), |(t, y, x)| {
            ((t + 3 * y + 7 * x) % 23 + 10) as u16
        }));
        let params = ContrastParams::spatial(Window::new(5).unwrap());
        // A 1 KiB budget holds no frame: the call must fail with a typed error.
        let tiny = device.clone().with_memory_limit(1 << 10);
        let maps = match contrast(&stack, &params, &tiny) {
            Err(speckle_core::Error::Gpu(e)) if e.is_out_of_memory() => {
                contrast(&stack, &params, &Device::cpu()).unwrap().0
            }
            Err(other) => panic!("expected an out-of-memory error, got: {other}"),
            Ok(_) => panic!("a 1 KiB device budget cannot hold two 64x80 frames"),
        };
        let (on_gpu, _) = contrast(&stack, &params, device).unwrap();
        assert_eq!(maps.k.dim(), on_gpu.k.dim());
    }
}
