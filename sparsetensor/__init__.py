"""sparsetensor"""
