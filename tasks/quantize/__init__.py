"""quantgate.tasks.quantize"""
