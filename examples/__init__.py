"""Example training scripts for the disc lazy-tensor device."""
