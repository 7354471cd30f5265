"""sparsetensor.interop"""
