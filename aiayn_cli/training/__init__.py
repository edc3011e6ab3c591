"""Training (§5): recipes (`recipe`), the run folder (`run_folder`), the loop (`trainer`, `loop`, and
its stop signals, `signals`), the run's one `Accelerator` in its precision (`accelerator`), the
label-smoothed loss (`loss`), the learning-rate schedule (`schedule`), checkpoints and their averaging
(`checkpoint`), validation (`validation`), the end of a run (`finish`: the average of the last
checkpoints, the length penalty) and the learning-curve picture (`curves`)."""
