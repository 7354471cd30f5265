"""sparsetensor.cuda"""
