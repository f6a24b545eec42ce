"""quantgate.kernels"""
