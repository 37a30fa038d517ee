use std::time::Instant;
use toy::model::{Logits, Model};
fn main() {
    let m = Model::open(std::path::Path::new("models/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let pool = rayon::ThreadPoolBuilder::new().build().unwrap();
    pool.install(|| {
    for n in [1usize, 2, 4, 8] {
        let mut scratch = m.new_state(64, 64);
        let mut caches: Vec<_> = (0..n).map(|_| m.new_cache(512)).collect();
        for c in caches.iter_mut() { m.forward_cache(&mut scratch, c, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], Logits::Last).unwrap(); }
        let toks: Vec<u32> = (0..n as u32).map(|i| 100 + i).collect();
        let t = Instant::now();
        let steps = 40;
        for _ in 0..steps {
            let mut refs: Vec<_> = caches.iter_mut().collect();
            m.forward_multi(&mut scratch, &mut refs, &toks).unwrap();
        }
        let dt = t.elapsed().as_secs_f64() / steps as f64;
        println!("n={n}: {:.2} ms/step, {:.0} tok/s", dt * 1e3, n as f64 / dt);
    }
    });
}
