"""radixrt's benchmarks, grouped by job (load/, peers/, soak/, scenarios/, micro/) with the
fixtures tests share (fixtures/); every runnable one is a row of registry.py. They import the
runtime; the runtime never imports them (they are not in the wheel)."""
