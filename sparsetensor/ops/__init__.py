"""sparsetensor.ops"""
