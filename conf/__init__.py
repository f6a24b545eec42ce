"""quantgate.conf"""
