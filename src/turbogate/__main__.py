from turbogate.cli import main

if __name__ == "__main__":  # not under multiprocessing's spawn, which imports this as __mp_main__
    main()
