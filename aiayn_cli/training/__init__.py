"""Training (§5): recipes (`recipe`), the run folder (`run_folder`), the loop (`trainer`, `loop`),
the label-smoothed loss (`loss`), the learning-rate schedule (`schedule`), checkpoints and their
averaging (`checkpoint`), validation (`validation`) and the learning-curve picture (`curves`)."""
