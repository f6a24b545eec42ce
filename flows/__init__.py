"""quantgate.flows"""
