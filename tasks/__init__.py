"""quantgate.tasks"""
