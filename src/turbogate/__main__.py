from turbogate.cli import main

main()
